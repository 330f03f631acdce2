//! Pretrained vectors: GloVe and word2vec text on small fixtures, the
//! exact-then-lowercase matching, and every error naming its file and line.

use std::path::{Path, PathBuf};

use sheaf_examples::sst::{parse_trees, read_embeddings, EmbeddingError, Pretrained, Vocab};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// <unk>=0 The=1 Rock=2 ,=3 the=4 rocks=5 Émile=6 NASA=7.
fn vocab() -> Vocab {
    let line =
        "(2 (2 (2 The) (2 Rock)) (2 (2 ,) (2 (2 the) (2 (2 rocks) (2 (2 Émile) (2 NASA))))))";
    let trees = parse_trees(line, "t").unwrap();
    let v = Vocab::from_trees(&trees);
    assert_eq!(
        v.words().collect::<Vec<_>>(),
        ["<unk>", "The", "Rock", ",", "the", "rocks", "Émile", "NASA"]
    );
    v
}

fn rows(p: &Pretrained) -> Vec<(u32, Vec<f32>)> {
    p.rows().map(|(id, r)| (id, r.to_vec())).collect()
}

#[test]
fn glove_exact_then_lowercase() {
    let p = read_embeddings(&fixture("glove_small.txt"), &vocab()).unwrap();
    assert_eq!(p.dim, 3);
    assert_eq!(p.ids, [1, 2, 3, 4, 6]);
    assert_eq!(p.vectors.len(), p.ids.len() * p.dim);
    let expect = vec![
        (1, vec![0.1, 0.2, 0.3]), // "The" <- "the" (lowercase)
        (2, vec![0.5, 0.5, 0.5]), // "Rock" exact, though "rock" comes first
        (3, vec![1.0, 2.0, 3.0]), // "," (not the spaced word ", ,")
        (4, vec![0.1, 0.2, 0.3]), // "the": the first of the two lines wins
        (6, vec![4.0, 5.0, 6.0]), // "Émile" <- "émile" (Unicode lowercase)
    ];
    assert_eq!(rows(&p), expect);
}

#[test]
fn word2vec_header_is_detected_and_skipped() {
    let p = read_embeddings(&fixture("w2v_small.txt"), &vocab()).unwrap();
    assert_eq!(p.dim, 3);
    // "the" does not take "The": only vocabulary words are lowercased.
    let expect = vec![
        (0, vec![0.0; 3]),
        (1, vec![1.0; 3]),
        (2, vec![3.0; 3]),
        (5, vec![2.0; 3]),
    ];
    assert_eq!(rows(&p), expect);
}

#[test]
fn crlf_tabs_bom_and_blank_lines() {
    let dir = std::env::temp_dir().join(format!("sheaf-emb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("crlf.txt");
    std::fs::write(
        &path,
        "\u{feff}2 2\r\n\r\nthe\t1 2\r\n  \r\nNASA 3   4 \r\n",
    )
    .unwrap();
    let p = read_embeddings(&path, &vocab()).unwrap();
    assert_eq!(
        rows(&p),
        vec![
            (1, vec![1.0, 2.0]),
            (4, vec![1.0, 2.0]),
            (7, vec![3.0, 4.0])
        ]
    );
    // Non-UTF-8 words are skipped, their values still read.
    std::fs::write(&path, b"caf\xe9 1 2\nthe 3 4\n").unwrap();
    assert_eq!(read_embeddings(&path, &vocab()).unwrap().ids, [1, 4]);
    std::fs::write(&path, b"caf\xe9 1 x\n").unwrap();
    let err = read_embeddings(&path, &vocab()).unwrap_err();
    assert!(
        matches!(
            err,
            EmbeddingError::BadNumber {
                line: 1,
                column: 8,
                ..
            }
        ),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs a fixture that must fail, checks the message names it, returns the error.
fn fails(name: &str) -> EmbeddingError {
    let err = read_embeddings(&fixture(name), &vocab()).unwrap_err();
    assert!(err.to_string().contains(name), "{err}");
    err
}

#[test]
fn missing_empty_and_unmatched_files() {
    assert!(matches!(
        fails("no_such_vectors.txt"),
        EmbeddingError::Io { .. }
    ));
    assert!(matches!(fails("empty.txt"), EmbeddingError::Empty { .. }));
    let err = fails("glove_no_match.txt");
    assert!(
        matches!(err, EmbeddingError::NoMatch { vectors: 2, .. }),
        "{err}"
    );
}

#[test]
fn malformed_lines_name_line_and_column() {
    let err = fails("glove_bad_dim.txt");
    assert!(
        matches!(
            err,
            EmbeddingError::Dimension {
                line: 3,
                expected: 3,
                found: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(err
        .to_string()
        .ends_with("glove_bad_dim.txt:3: 2 values, expected 3 (set by line 1)"));

    let err = fails("glove_bad_number.txt");
    assert!(
        matches!(err, EmbeddingError::BadNumber { line: 2, column: 9, ref text, .. } if text == "abc")
    );
    assert!(
        err.to_string()
            .ends_with("glove_bad_number.txt:2:9: \"abc\" is not a number"),
        "{err}"
    );

    // The column counts characters: "émile" is 6 bytes but 5 characters.
    let err = fails("glove_nonfinite.txt");
    assert!(
        matches!(err, EmbeddingError::NonFinite { line: 2, column: 9, ref text, .. } if text == "NaN"),
        "{err}"
    );

    let err = fails("glove_no_values.txt");
    assert!(
        matches!(err, EmbeddingError::NoValues { line: 2, .. }),
        "{err}"
    );

    let err = fails("w2v_bad_dim.txt");
    assert!(
        matches!(
            err,
            EmbeddingError::Dimension {
                line: 2,
                expected: 5,
                found: 3,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("header on line 1"), "{err}");

    let err = fails("w2v_bad_count.txt");
    assert!(
        matches!(
            err,
            EmbeddingError::Header {
                line: 1,
                announced: 3,
                found: 2,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn words_with_spaces_are_skipped_extra_numbers_are_not() {
    let dir = std::env::temp_dir().join(format!("sheaf-emb-sp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("spaced.txt");
    // glove.840B style: the first line fixes d = 2, then a word with spaces.
    std::fs::write(&path, "the 1 2\nat the 3 4\n. . . 5 6\nRock 7 8\n").unwrap();
    let p = read_embeddings(&path, &vocab()).unwrap();
    assert_eq!(
        rows(&p),
        vec![
            (1, vec![1.0, 2.0]),
            (2, vec![7.0, 8.0]),
            (4, vec![1.0, 2.0])
        ]
    );
    // Extra numbers are a wrong dimension, not part of the word.
    std::fs::write(&path, "the 1 2\nRock 3 4 5\n").unwrap();
    let err = read_embeddings(&path, &vocab()).unwrap_err();
    assert!(
        matches!(
            err,
            EmbeddingError::Dimension {
                line: 2,
                expected: 2,
                found: 3,
                ..
            }
        ),
        "{err}"
    );
    // A bad value in a spaced word's vector is still an error.
    std::fs::write(&path, "the 1 2\na b 3 x\n").unwrap();
    let err = read_embeddings(&path, &vocab()).unwrap_err();
    assert!(
        matches!(
            err,
            EmbeddingError::BadNumber {
                line: 2,
                column: 7,
                ..
            }
        ),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn infinities_and_overflow_are_rejected() {
    let dir = std::env::temp_dir().join(format!("sheaf-emb-inf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("inf.txt");
    for bad in ["inf", "-infinity", "1e39", "nan"] {
        std::fs::write(&path, format!("the 1 2\nrock 3 {bad}\n")).unwrap();
        let err = read_embeddings(&path, &vocab()).unwrap_err();
        assert!(
            matches!(
                err,
                EmbeddingError::NonFinite {
                    line: 2,
                    column: 8,
                    ..
                }
            ),
            "{bad}: {err}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
