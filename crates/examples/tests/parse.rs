//! The SST tree parser: the real files, exact round trips, every error
//! kind with its line and column, deep nesting, and fuzzing for panics.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use sheaf_examples::sst::{
    parse_tree, parse_trees, read_trees, DataError, Node, ParseError, ParseErrorKind, Tree,
};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/sst")
        .join(name)
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The structural invariants every parsed tree must satisfy.
fn check_invariants(t: &Tree) {
    let leaves = t
        .nodes
        .iter()
        .filter(|n| matches!(n, Node::Leaf { .. }))
        .count();
    assert_eq!(leaves, t.words.len());
    assert_eq!(t.nodes.len(), 2 * leaves - 1);
    assert!(t.root_label().is_some());
    let mut next_word = 0;
    let mut is_child = vec![false; t.nodes.len()];
    for (i, n) in t.nodes.iter().enumerate() {
        assert!(n.label() < 5);
        match *n {
            Node::Leaf { word, .. } => {
                // Words in left-to-right order: post-order visits leaves that way.
                assert_eq!(word as usize, next_word);
                next_word += 1;
            }
            Node::Inner { left, right, .. } => {
                assert!((left as usize) < i && (right as usize) < i && left < right);
                for c in [left, right] {
                    assert!(!is_child[c as usize], "node {c} has two parents");
                    is_child[c as usize] = true;
                }
            }
        }
    }
    // Every node but the root (the last) is somebody's child.
    assert_eq!(is_child.iter().filter(|&&c| !c).count(), 1);
    assert!(!is_child[t.nodes.len() - 1]);
}

#[test]
fn real_files_parse_with_the_right_counts() {
    for (name, count) in [("train.txt", 8544), ("dev.txt", 1101), ("test.txt", 2210)] {
        let trees = read_trees(&data(name)).unwrap();
        assert_eq!(trees.len(), count, "{name}");
        trees.iter().for_each(check_invariants);
    }
}

#[test]
fn real_files_round_trip_line_for_line() {
    for name in ["train.txt", "dev.txt", "test.txt"] {
        let text = std::fs::read_to_string(data(name)).unwrap();
        let trees = parse_trees(&text, name).unwrap();
        let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
        assert_eq!(lines.len(), trees.len());
        for (no, (line, tree)) in lines.iter().zip(&trees).enumerate() {
            assert_eq!(&tree.to_ptb(), line, "{name}:{}", no + 1);
        }
        // The same file with CRLF line ends gives the same trees.
        assert_eq!(
            parse_trees(&text.replace('\n', "\r\n"), name).unwrap(),
            trees
        );
    }
}

#[test]
fn crlf_and_blank_lines_are_accepted() {
    let lf = std::fs::read_to_string(fixture("tiny.txt")).unwrap();
    let trees = parse_trees(&lf, "tiny.txt").unwrap();
    assert_eq!(trees.len(), 20);
    let crlf = lf.replace('\n', "\r\n");
    assert_eq!(parse_trees(&crlf, "tiny-crlf.txt").unwrap(), trees);
    // Blank and whitespace-only lines are skipped; a BOM is ignored.
    let spaced = format!("\u{feff}\n  \t\r\n{}\n\n", lf.replace('\n', "\n\r\n"));
    assert_eq!(parse_trees(&spaced, "spaced.txt").unwrap(), trees);
    for (line, tree) in lf.lines().zip(&trees) {
        assert_eq!(tree.to_ptb(), line);
    }
}

#[test]
fn small_tree_is_post_order() {
    let t = parse_tree("(3 (2 (2 The) (2 Rock)) (4 rocks))").unwrap();
    assert_eq!(t.words, ["The", "Rock", "rocks"]);
    let expect = [
        Node::Leaf { word: 0, label: 2 },
        Node::Leaf { word: 1, label: 2 },
        Node::Inner {
            left: 0,
            right: 1,
            label: 2,
        },
        Node::Leaf { word: 2, label: 4 },
        Node::Inner {
            left: 2,
            right: 3,
            label: 3,
        },
    ];
    assert_eq!(t.nodes, expect);
    assert_eq!(t.root_label(), Some(3));
    // A single leaf is a whole tree; extra ASCII whitespace is tolerated.
    let leaf = parse_tree(" \t( 1   alone )\r").unwrap();
    assert_eq!(leaf.nodes, [Node::Leaf { word: 0, label: 1 }]);
    assert_eq!(leaf.to_ptb(), "(1 alone)");
    assert_eq!(Tree::default().to_ptb(), "");
}

#[test]
fn nbsp_stays_inside_one_token() {
    let trees = read_trees(&data("train.txt")).unwrap();
    let with_nbsp: Vec<&str> = trees
        .iter()
        .flat_map(|t| &t.words)
        .filter(|w| w.contains('\u{a0}'))
        .map(String::as_str)
        .collect();
    assert!(with_nbsp.contains(&"8\u{a0}1\\/2"), "{with_nbsp:?}");
    assert!(with_nbsp.contains(&"2\u{a0}1\\/2"), "{with_nbsp:?}");
    let t = parse_tree("(2 (2 8\u{a0}1\\/2) (2 x\u{a0}))").unwrap();
    assert_eq!(t.words, ["8\u{a0}1\\/2", "x\u{a0}"]);
    // Other Unicode spaces are word characters too; only ASCII separates.
    assert_eq!(parse_tree("(2 a\u{2003}b)").unwrap().words, ["a\u{2003}b"]);
}

/// `(input, kind, column)` for one error per kind.
fn error_cases() -> Vec<(&'static str, ParseErrorKind, usize)> {
    use ParseErrorKind::*;
    vec![
        ("   ", EmptyInput, 4),
        ("x (2 a)", ExpectedOpen('x'), 1),
        ("é", ExpectedOpen('é'), 1),
        ("(2 a", UnbalancedOpen, 1),
        ("(3 (2 a) (2 b)", UnbalancedOpen, 1),
        ("(3 (2 a) (2 (1 b) (1 c)", UnbalancedOpen, 10),
        (")", UnbalancedClose, 1),
        ("(2 a))", UnbalancedClose, 6),
        ("(2 a) x", TextAfterTree, 7),
        ("(2 a) (2 b)", TextAfterTree, 7),
        ("(x a)", BadLabel("x".into()), 2),
        ("(-1 a)", BadLabel("-1".into()), 2),
        ("(2a b)", BadLabel("2a".into()), 2),
        ("(3 (2 a) (+2 b))", BadLabel("+2".into()), 11),
        ("(5 a)", LabelOutOfRange(5), 2),
        ("(3 (2 a) (12 b))", LabelOutOfRange(12), 11),
        ("(99999999999 a)", BadLabel("99999999999".into()), 2),
        ("( a)", BadLabel("a".into()), 3),
        ("(", MissingLabel, 1),
        ("(3 (2 a) ((2 b) (2 c)))", MissingLabel, 10),
        ("(3 (2 a) ( ))", MissingLabel, 10),
        ("(2 )", EmptyLeaf, 1),
        ("(3 (2 a) (2))", EmptyLeaf, 10),
        ("(2 a b)", ManyWords(2), 1),
        ("(3 (2 a b c) (2 d))", ManyWords(3), 4),
        ("(3 (2 a))", NotBinary(1), 1),
        ("(3 (2 a) (2 b) (2 c))", NotBinary(3), 1),
        (
            "(3 (2 a) b)",
            MixedChildren {
                words: 1,
                subtrees: 1,
            },
            1,
        ),
        (
            "(3 a (2 b) (2 c))",
            MixedChildren {
                words: 1,
                subtrees: 2,
            },
            1,
        ),
        ("(2 a\u{1}b)", StrayCharacter('\u{1}'), 5),
        ("(2 a)\u{b}", StrayCharacter('\u{b}'), 6),
        ("(2\u{7f} a)", StrayCharacter('\u{7f}'), 3),
    ]
}

#[test]
fn each_error_kind_at_its_column() {
    for (input, kind, column) in error_cases() {
        assert_eq!(parse_tree(input), Err((column, kind)), "{input:?}");
    }
}

#[test]
fn columns_count_characters_not_bytes() {
    // "é" and "\u{a0}" are two bytes each, "🎬" four.
    let (col, kind) = parse_tree("(3 (2 é\u{a0}🎬) (7 b))").unwrap_err();
    assert_eq!((col, kind), (13, ParseErrorKind::LabelOutOfRange(7)));
}

#[test]
fn errors_name_file_line_and_column() {
    let text = "(2 (2 a) (2 b))\n\n(3 (2 c) (9 d))\n(2 e)\n";
    let err = parse_trees(text, "dev.txt").unwrap_err();
    assert_eq!(
        err,
        ParseError {
            file: "dev.txt".into(),
            line: 3,
            column: 11,
            kind: ParseErrorKind::LabelOutOfRange(9)
        }
    );
    assert_eq!(err.to_string(), "dev.txt:3:11: label 9 is outside 0 to 4");
    // Same with CRLF line ends and the error on line 3 after a blank line.
    let crlf = "(2 x)\r\n\r\n(2 (2 y) (2 z) \r\n";
    let err = parse_trees(crlf, "t.txt").unwrap_err();
    assert_eq!(
        (err.line, err.column, err.kind),
        (3, 1, ParseErrorKind::UnbalancedOpen)
    );
    // Every kind's message is a readable sentence, not the Debug form.
    for (input, kind, _) in error_cases() {
        let msg = kind.to_string();
        assert!(
            msg.len() > 8 && !msg.contains("ParseErrorKind"),
            "{input:?}: {msg}"
        );
    }
}

#[test]
fn read_trees_reports_path_and_problem() {
    let missing = fixture("no-such-file.txt");
    let err = read_trees(&missing).unwrap_err();
    assert!(matches!(err, DataError::Io { .. }));
    assert!(err.to_string().contains("no-such-file.txt"), "{err}");

    let dir = std::env::temp_dir().join(format!("sheaf-parse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "\n  \n").unwrap();
    let err = read_trees(&empty).unwrap_err();
    assert!(matches!(err, DataError::Empty { .. }));
    assert!(err.to_string().contains("empty.txt"), "{err}");

    let bad = dir.join("latin1.txt");
    std::fs::write(&bad, b"(2 a)\n(2 caf\xe9)\n").unwrap();
    match read_trees(&bad).unwrap_err() {
        DataError::Parse(e) => {
            assert_eq!(
                (e.line, e.column, e.kind),
                (2, 7, ParseErrorKind::InvalidUtf8)
            );
            assert!(e.file.ends_with("latin1.txt"));
        }
        other => panic!("{other}"),
    }

    let broken = dir.join("broken.txt");
    std::fs::write(&broken, "(2 a)\n(2 b)\n(2 (2 c) (2 d)\n").unwrap();
    let err = read_trees(&broken).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("broken.txt:3:1: `(` is never closed"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn deep_nesting_never_overflows_the_stack() {
    const DEPTH: usize = 100_000;
    // 100,000 unclosed opens: a clean error at the innermost one.
    let opens = "(2 ".repeat(DEPTH);
    assert_eq!(
        parse_tree(&opens),
        Err((3 * (DEPTH - 1) + 1, ParseErrorKind::UnbalancedOpen))
    );
    let nested = format!("{}{}", "(2 ".repeat(DEPTH), ")".repeat(DEPTH));
    assert_eq!(
        parse_tree(&nested).unwrap_err().1,
        ParseErrorKind::EmptyLeaf
    );

    // A valid left-deep tree with DEPTH inner nodes parses and round-trips
    // (to_ptb is iterative too).
    let mut line = "(1 ".repeat(DEPTH);
    line.push_str("(2 w0)");
    for k in 1..=DEPTH {
        line.push_str(&format!(" (3 w{k}))"));
    }
    let t = parse_tree(&line).unwrap();
    assert_eq!(t.nodes.len(), 2 * DEPTH + 1);
    assert_eq!(t.words.len(), DEPTH + 1);
    check_invariants(&t);
    assert_eq!(t.to_ptb(), line);
}

/// A random valid tree line of up to `leaves` leaves, built without
/// recursion from a list of choices.
fn tree_line(words: Vec<(u8, String)>, splits: Vec<usize>, labels: Vec<u8>) -> String {
    // Start from the leaves and repeatedly merge two adjacent subtrees.
    let mut parts: Vec<String> = words
        .into_iter()
        .map(|(l, w)| format!("({l} {w})"))
        .collect();
    let mut k = 0;
    while parts.len() > 1 {
        let at = splits[k % splits.len()] % (parts.len() - 1);
        let right = parts.remove(at + 1);
        let label = labels[k % labels.len()];
        parts[at] = format!("({label} {} {right})", parts[at]);
        k += 1;
    }
    parts.pop().unwrap()
}

fn valid_line() -> impl Strategy<Value = String> {
    let word = "[^\\s()\\x00-\\x1f\\x7f]{1,6}";
    (
        prop::collection::vec((0u8..5, word), 1..24),
        prop::collection::vec(any::<usize>(), 1..8),
        prop::collection::vec(0u8..5, 1..8),
    )
        .prop_map(|(w, s, l)| tree_line(w, s, l))
}

/// Checks a parse result's error column is inside the line (or just past).
fn column_in_range(line: &str, r: &Result<Tree, (usize, ParseErrorKind)>) -> bool {
    match r {
        Ok(t) => t.nodes.len() == 2 * t.words.len() - 1,
        Err((c, _)) => *c >= 1 && *c <= line.chars().count() + 1,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn valid_lines_round_trip(line in valid_line()) {
        let t = parse_tree(&line).unwrap();
        check_invariants(&t);
        prop_assert_eq!(t.to_ptb(), line);
    }

    #[test]
    fn arbitrary_strings_never_panic(s in "\\PC*|[()0-9 a-z\\t\\r\\n\u{a0}é]*") {
        let r = parse_tree(&s);
        prop_assert!(column_in_range(&s, &r));
        if let Ok(t) = &r {
            prop_assert_eq!(&parse_tree(&t.to_ptb()).unwrap(), t);
        }
        let _ = parse_trees(&s, "fuzz");
    }

    #[test]
    fn mutated_lines_never_panic(
        line in valid_line(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, prop::sample::select(vec!['(', ')', ' ', '7', 'x', '\u{a0}', '\u{1}', '2'])), 1..4),
    ) {
        let mut chars: Vec<char> = line.chars().collect();
        for (at, op, c) in edits {
            let i = at.index(chars.len() + 1);
            match op {
                0 => chars.insert(i, c),
                1 if i < chars.len() => { chars.remove(i); }
                _ if i < chars.len() => chars[i] = c,
                _ => chars.push(c),
            }
        }
        let s: String = chars.into_iter().collect();
        let r = parse_tree(&s);
        prop_assert!(column_in_range(&s, &r));
        if let Ok(t) = &r {
            check_invariants(t);
            prop_assert_eq!(&parse_tree(&t.to_ptb()).unwrap(), t);
        }
    }
}
