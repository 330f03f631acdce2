//! The vocabulary: deterministic ids, `<unk>`, encoding, and the strict
//! text format saved next to checkpoints.

use std::path::Path;

use sheaf_examples::sst::{parse_trees, read_trees, Node, Vocab, VocabErrorKind};

fn train() -> Vec<sheaf_examples::sst::Tree> {
    read_trees(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/sst/train.txt")).unwrap()
}

#[test]
fn ids_by_first_occurrence_and_deterministic() {
    let trees = parse_trees(
        "(3 (2 (2 The) (2 Rock)) (2 (2 the) (2 Rock)))\n(1 (2 a) (2 The))",
        "t",
    )
    .unwrap();
    let v = Vocab::from_trees(&trees);
    assert_eq!(
        v.words().collect::<Vec<_>>(),
        ["<unk>", "The", "Rock", "the", "a"]
    );
    assert_eq!(v.len(), 5);
    assert!(!v.is_empty());
    assert_eq!(
        (v.id("The"), v.id("Rock"), v.id("the"), v.id("a")),
        (1, 2, 3, 4)
    );

    let train = train();
    let a = Vocab::from_trees(&train);
    let b = Vocab::from_trees(train.iter());
    assert_eq!(a, b);
    // Every training token, and only those, plus <unk>.
    let distinct: std::collections::HashSet<&str> = train
        .iter()
        .flat_map(|t| t.words.iter().map(String::as_str))
        .collect();
    assert_eq!(a.len(), distinct.len() + 1);
    assert_eq!(a.word(1), Some(train[0].words[0].as_str()));
    for (id, w) in a.words().enumerate() {
        assert_eq!(a.id(w), id as u32);
        assert_eq!(a.word(id as u32), Some(w));
    }
}

#[test]
fn unknown_words_map_to_unk() {
    let v = Vocab::from_trees(&train());
    assert_eq!(Vocab::UNK, 0);
    assert_eq!(v.word(Vocab::UNK), Some("<unk>"));
    assert_eq!(v.id("surely-not-a-token-xyz"), Vocab::UNK);
    assert_eq!(v.get("surely-not-a-token-xyz"), None);
    assert_eq!(v.get("<unk>"), Some(Vocab::UNK));
    assert_eq!(v.word(v.len() as u32), None);
    // Case matters: the lowercase fallback belongs to pretrained vectors only.
    assert_ne!(v.id("The"), v.id("the"));
    // The non-breaking-space token is one word.
    assert_ne!(v.id("8\u{a0}1\\/2"), Vocab::UNK);
}

#[test]
fn encode_gives_the_ids_of_the_leaves() {
    let train = train();
    let v = Vocab::from_trees(&train[..100]);
    let dev = parse_trees("(2 (2 (2 The) (2 zyzzyva)) (2 .))", "d").unwrap();
    let ids = v.encode(&dev[0]);
    assert_eq!(ids, [v.id("The"), Vocab::UNK, v.id(".")]);
    for t in &train[..100] {
        let ids = v.encode(t);
        assert_eq!(ids.len(), t.words.len());
        for n in &t.nodes {
            if let Node::Leaf { word, .. } = *n {
                assert_eq!(
                    v.word(ids[word as usize]),
                    Some(t.words[word as usize].as_str())
                );
            }
        }
    }
}

#[test]
fn text_round_trip() {
    let v = Vocab::from_trees(&train());
    let text = v.to_text();
    assert!(text.starts_with("<unk>\n") && text.ends_with('\n'));
    assert_eq!(text.lines().count(), v.len());
    assert_eq!(Vocab::from_text(&text, "vocab.txt").unwrap(), v);
    // CRLF and a missing final newline are accepted.
    assert_eq!(
        Vocab::from_text(&text.replace('\n', "\r\n"), "v").unwrap(),
        v
    );
    assert_eq!(
        Vocab::from_text(text.trim_end_matches('\n'), "v").unwrap(),
        v
    );
    let only_unk = Vocab::from_text("<unk>\n", "v").unwrap();
    assert_eq!((only_unk.len(), only_unk.id("x")), (1, Vocab::UNK));
}

#[test]
fn text_errors_name_file_and_line() {
    let cases = [
        ("", 1, VocabErrorKind::Empty),
        ("\n", 1, VocabErrorKind::Empty),
        ("the\n<unk>\n", 1, VocabErrorKind::MissingUnk("the".into())),
        ("\n<unk>\n", 1, VocabErrorKind::MissingUnk(String::new())),
        ("<unk>\na\n\nb\n", 3, VocabErrorKind::BlankLine),
        ("<unk>\na\nb\n\n", 4, VocabErrorKind::BlankLine),
        (
            "<unk>\na\nb\na\n",
            4,
            VocabErrorKind::Duplicate {
                word: "a".into(),
                first_line: 2,
            },
        ),
        (
            "<unk>\na\n<unk>\n",
            3,
            VocabErrorKind::Duplicate {
                word: "<unk>".into(),
                first_line: 1,
            },
        ),
        ("<unk>\na b\n", 2, VocabErrorKind::Whitespace),
        ("<unk>\n\ta\n", 2, VocabErrorKind::Whitespace),
    ];
    for (text, line, kind) in cases {
        let err = Vocab::from_text(text, "ckpt/vocab.txt").unwrap_err();
        assert_eq!((err.line, &err.kind), (line, &kind), "{text:?}");
        assert_eq!(err.file, "ckpt/vocab.txt");
        assert!(
            err.to_string()
                .starts_with(&format!("ckpt/vocab.txt:{line}: ")),
            "{err}"
        );
    }
    let err = Vocab::from_text("<unk>\na\nb\na\n", "v.txt").unwrap_err();
    assert_eq!(
        err.to_string(),
        "v.txt:4: duplicate word \"a\" (first on line 2)"
    );
}
