//! Bytes in JSON: valid UTF-8 as a string under `NAME`, anything else as base64 under
//! `NAME_b64`. Used by `basalt dump`/`load` and the change feed.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{Map, Value};

/// Stores `bytes` in `obj` under `name` (UTF-8) or `name_b64` (base64).
pub fn put(obj: &mut Map<String, Value>, name: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => obj.insert(name.to_string(), Value::String(s.to_string())),
        Err(_) => obj.insert(format!("{name}_b64"), Value::String(B64.encode(bytes))),
    };
}

/// Reads the bytes stored by [`put`]; `Ok(None)` when neither field is present.
pub fn get(obj: &Map<String, Value>, name: &str) -> Result<Option<Vec<u8>>, String> {
    if let Some(v) = obj.get(name) {
        return v
            .as_str()
            .map(|s| Some(s.as_bytes().to_vec()))
            .ok_or_else(|| format!("`{name}` must be a string"));
    }
    match obj.get(&format!("{name}_b64")) {
        None => Ok(None),
        Some(Value::String(s)) => B64
            .decode(s)
            .map(Some)
            .map_err(|e| format!("`{name}_b64` is not base64: {e}")),
        Some(_) => Err(format!("`{name}_b64` must be a string")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_binary_round_trip() {
        for b in [&b"plain"[..], &[0xff, 0, 0xfe][..], &b""[..]] {
            let mut m = Map::new();
            put(&mut m, "key", b);
            assert_eq!(get(&m, "key").unwrap().as_deref(), Some(b));
        }
        let mut m = Map::new();
        put(&mut m, "v", &[0xc3]);
        assert!(m.contains_key("v_b64"));
        assert_eq!(get(&Map::new(), "v").unwrap(), None);
        m.insert("w_b64".into(), Value::String("!!".into()));
        assert!(get(&m, "w").is_err());
    }
}
