//! Compile-time behaviour of `#[corral::cached]`: accepted signatures
//! compile and run; unsupported ones fail with the errors in the `.stderr`
//! files next to them (regenerate with `TRYBUILD=overwrite` and review).

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
