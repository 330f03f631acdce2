//! W3 with its cells called as vertex functions gives the inlined model's
//! root states (within 1e-6: the same kernels, rows batched differently) under the
//! reference executor, Depth and Agenda, on random and same-shape trees,
//! with under a third of the graph nodes (one per tree node).

use sheaf_autodiff::{Graph, ParamStore};
use sheaf_benches::w3::{infer_graph_with, trees, Model, VertexCells};
use sheaf_sched::{Executor, Strategy};

const H: usize = 16;

#[test]
fn vertex_cells_equal_the_inlined_model() {
    let mut store = ParamStore::new();
    let model = Model::new(&mut store, H, 7).expect("model");
    let cells = VertexCells::new(&model).expect("trace");
    for same in [false, true] {
        let ts = trees(6, same, 9);
        for strategy in [None, Some(Strategy::Depth), Some(Strategy::Agenda)] {
            let run = |cells: Option<&VertexCells>| {
                let mut g = Graph::new();
                let mut exec = strategy.map(Executor::new);
                let roots = infer_graph_with(&mut g, exec.as_mut(), &store, &model, cells, &ts)
                    .expect("inference");
                (roots, g.len())
            };
            let (inline, inline_nodes) = run(None);
            let (vertex, vertex_nodes) = run(Some(&cells));
            for (k, (a, b)) in inline.iter().zip(&vertex).enumerate() {
                let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
                let worst = a
                    .iter()
                    .zip(&b)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0, f32::max);
                assert!(
                    worst <= 1e-6,
                    "same {same}, {strategy:?}, tree {k}: {worst}"
                );
            }
            assert!(
                vertex_nodes * 3 < inline_nodes,
                "{vertex_nodes} graph nodes with vertex functions, {inline_nodes} inlined"
            );
        }
    }
}
