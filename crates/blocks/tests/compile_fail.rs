//! Block type errors are compile errors: each file under `tests/ui` must
//! fail to build with the message kept beside it (`*.stderr`; regenerate
//! with `TRYBUILD=overwrite` after reviewing a change).

#[test]
fn type_errors_do_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
