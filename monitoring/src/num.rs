//! Lenient, exact number extraction from tool JSON.
//!
//! smartctl prints integers that do not fit in 53 bits twice: as a number and as a string under
//! `KEY_s`; nvme-cli prints 128-bit counters as strings in some versions. These helpers accept a
//! number, a decimal string (optionally with thousands separators or a unit suffix such as `" C"`)
//! and prefer the exact `KEY_s` form, so 128-bit counters are parsed without loss.

use serde_json::Value;

/// Parses a JSON value as an unsigned integer, exactly. Floats are accepted only when integral.
pub fn value_u128(v: &Value) -> Option<u128> {
    match v {
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Some(u as u128)
            } else if let Some(f) = n.as_f64() {
                (f >= 0.0 && f.fract() == 0.0 && f < 3.4e38).then_some(f as u128)
            } else {
                None
            }
        }
        Value::String(s) => str_u128(s),
        _ => None,
    }
}

/// Parses a decimal string such as `"65602088"`, `"1,234"`, `"0x1F"` or `"308 K"` (first token).
pub fn str_u128(s: &str) -> Option<u128> {
    let first = s.split_whitespace().next()?;
    if let Some(hex) = first
        .strip_prefix("0x")
        .or_else(|| first.strip_prefix("0X"))
    {
        return u128::from_str_radix(hex, 16).ok();
    }
    let digits: String = first.chars().filter(|c| *c != ',' && *c != '_').collect();
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Parses a JSON value as a signed integer (numbers or numeric strings).
pub fn value_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
        Value::String(s) => {
            let first = s.split_whitespace().next()?;
            first.parse().ok()
        }
        _ => None,
    }
}

/// Field `key` of `obj` as u128, preferring the exact string twin `key_s` that smartctl adds.
pub fn field_u128(obj: &Value, key: &str) -> Option<u128> {
    if let Some(s) = obj.get(format!("{key}_s")).and_then(Value::as_str) {
        if let Some(v) = str_u128(s) {
            return Some(v);
        }
    }
    obj.get(key).and_then(value_u128)
}

/// Field `key` of `obj` as u64 (None when absent, malformed or too large).
pub fn field_u64(obj: &Value, key: &str) -> Option<u64> {
    field_u128(obj, key).and_then(|v| u64::try_from(v).ok())
}

/// Field `key` of `obj` as u32 (None when absent, malformed or too large).
pub fn field_u32(obj: &Value, key: &str) -> Option<u32> {
    field_u128(obj, key).and_then(|v| u32::try_from(v).ok())
}

/// Field `key` of `obj` as i64.
pub fn field_i64(obj: &Value, key: &str) -> Option<i64> {
    obj.get(key).and_then(value_i64)
}

/// Field `key` of `obj` as a trimmed, non-empty string.
pub fn field_str(obj: &Value, key: &str) -> Option<String> {
    let s = obj.get(key)?.as_str()?.trim();
    (!s.is_empty()).then(|| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn string_twin_gives_exact_128_bit_value() {
        let v = json!({"data_units_written": 3.402823669209385e38, "data_units_written_s": "340282366920938463463374607431768211455"});
        assert_eq!(field_u128(&v, "data_units_written"), Some(u128::MAX));
    }

    #[test]
    fn numeric_strings_with_separators_and_units_parse() {
        assert_eq!(str_u128("1,234,567"), Some(1_234_567));
        assert_eq!(str_u128("308 K"), Some(308));
        assert_eq!(str_u128("0x10"), Some(16));
        assert_eq!(str_u128("abc"), None);
        assert_eq!(str_u128(""), None);
        assert_eq!(str_u128("-5"), None);
    }

    #[test]
    fn wrong_types_give_none_not_panic() {
        let v = json!({"a": [1], "b": {"x": 1}, "c": null, "d": -3, "e": 1.5});
        for k in ["a", "b", "c", "d", "e", "missing"] {
            assert_eq!(field_u64(&v, k), None, "{k}");
        }
        assert_eq!(field_i64(&v, "d"), Some(-3));
    }
}
