//! No silent release: every acquire of every kind, written as a statement that drops its
//! guard at once (`lock.try_lock(wait, lease).await?;`), fails to compile under
//! `#![deny(unused_must_use)]` (and warns without it). `try_lock` and `try_acquire` return
//! the guard itself, with a timeout as `Error::Timeout`, so the `#[must_use]` guard is the
//! value left unused; an `Option` or `Vec` would not carry the lint.
//!
//! The expected compiler output is in `tests/compile_fail/*.stderr` (regenerate with
//! `TRYBUILD=overwrite cargo test --test compile_fail` after a deliberate change).

#[test]
fn forgotten_guards_do_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/compile_fail/*.rs");
}
