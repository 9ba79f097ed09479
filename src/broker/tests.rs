//! Unit tests of the node list and each node's URL.
use super::*;

#[test]
fn a_list_names_each_node() {
    assert_eq!(
        node_urls(" amqp://a:1/%2f, amqp://b:2/%2f ,,amqp://c:3/%2f"),
        ["amqp://a:1/%2f", "amqp://b:2/%2f", "amqp://c:3/%2f"]
    );
}

#[test]
fn a_node_gets_the_default_heartbeat_unless_its_url_names_one() {
    let uri = node_uri("amqp://guest:guest@127.0.0.1:5672/%2f").unwrap();
    assert_eq!(uri.query.heartbeat, Some(DEFAULT_HEARTBEAT_SECS));
    let uri = node_uri("amqp://guest:guest@127.0.0.1:5672/%2f?heartbeat=30").unwrap();
    assert_eq!(uri.query.heartbeat, Some(30));
    let err = node_uri("http://user:hunter2@x").unwrap_err();
    assert!(!format!("{err:#}").contains("hunter2"));
}
