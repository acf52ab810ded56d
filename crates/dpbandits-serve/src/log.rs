//! The service's structured log: one JSON object a line on stderr (`ts`, `event`, the
//! event's fields). Below every other module of the crate (the HTTP layer, the state machine,
//! the server and the publisher all write it).

use serde_json::{Map, Value};

/// One structured log line on stderr (JSON). Never carries reward values.
pub fn log(event: &str, fields: Value) {
    let mut m = Map::new();
    m.insert("ts".into(), Value::String(crate::store::now()));
    m.insert("event".into(), Value::String(event.into()));
    if let Value::Object(f) = fields {
        m.extend(f);
    }
    // One write per line: stderr is unbuffered, and formatting through `eprintln!` would make
    // a system call per fragment of the line.
    let mut line = serde_json::to_vec(&Value::Object(m)).unwrap_or_default();
    line.push(b'\n');
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), &line);
}
