//! A client sidecar → server sidecar pair to a plaintext target, end to end.

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread")]
async fn echo_through_the_pair() {
    let pair = Pair::start(&[], &[]).await;
    let mut s = pair.connect().await;
    assert_eq!(roundtrip(&mut s, b"hello replica").await, b"hello replica");
    assert_eq!(pair.echo.accepted(), 1);
}
