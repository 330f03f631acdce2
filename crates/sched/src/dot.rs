//! Graphviz export of a plan: nodes grouped by batch, so a user can see
//! which nodes ran together and which ran alone.

use std::fmt::Write;

use sheaf_autodiff::{Graph, NodeKind};

use crate::plan::Plan;

impl Plan {
    /// The plan as a Graphviz `digraph`: one cluster per batch (labelled
    /// with its position, op and size), edges from arguments to consumers.
    /// Leaves (inputs, parameters) appear as plain boxes outside clusters.
    pub fn to_dot(&self, g: &Graph) -> String {
        let mut s =
            String::from("digraph plan {\n  rankdir=BT;\n  node [shape=box, fontsize=10];\n");
        let mut planned = vec![false; g.len()];
        for (i, batch) in self.batches.iter().enumerate() {
            let op = batch.nodes.first().map(|&n| g.op_name(n)).unwrap_or("?");
            let _ = writeln!(
                s,
                "  subgraph cluster_{i} {{\n    label=\"batch {i}: {op} x{}\";\n    style=rounded;",
                batch.nodes.len()
            );
            for &n in &batch.nodes {
                planned[n.index()] = true;
                let _ = writeln!(
                    s,
                    "    n{} [label=\"{} {}\"];",
                    n.index(),
                    n,
                    g.node(n).shape()
                );
            }
            s.push_str("  }\n");
        }
        for (i, &is_planned) in planned.iter().enumerate() {
            let n = sheaf_autodiff::NodeId::from_index(i);
            if !is_planned && g.node(n).kind() != NodeKind::Op {
                let used = self
                    .batches
                    .iter()
                    .flat_map(|b| b.nodes.iter())
                    .any(|&c| g.args(c).contains(&n));
                if used {
                    let _ = writeln!(
                        s,
                        "  n{i} [label=\"{} {} {}\", style=dashed];",
                        g.op_name(n),
                        n,
                        g.node(n).shape()
                    );
                }
            }
        }
        for batch in &self.batches {
            for &n in &batch.nodes {
                for &a in g.args(n) {
                    let _ = writeln!(s, "  n{} -> n{};", a.index(), n.index());
                }
            }
        }
        s.push_str("}\n");
        s
    }
}
