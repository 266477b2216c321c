//! Redis Cluster hash slots: which bytes of a key Redis hashes, and the slot they give.

/// The bytes Redis Cluster hashes for `key`: its `{tag}` if it has a non-empty one, else the
/// whole key.
pub(crate) fn slot_part(key: &str) -> &str {
    if let Some(open) = key.find('{') {
        if let Some(len) = key[open + 1..].find('}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// The hash slot of `key`: CRC16 (XMODEM) of [`slot_part`], modulo 16384.
pub(crate) fn hash_slot(key: &str) -> u16 {
    let mut crc: u16 = 0;
    for &byte in slot_part(key).as_bytes() {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slots `CLUSTER KEYSLOT` gives for these keys.
    #[test]
    fn slots_match_redis() {
        assert_eq!(hash_slot("foo"), 12182);
        assert_eq!(hash_slot("123456789"), 12739);
        assert_eq!(hash_slot("{user1000}.following"), hash_slot("user1000"));
        assert_eq!(hash_slot("foo{}{bar}"), hash_slot("foo{}{bar}"));
        assert_eq!(slot_part("foo{}{bar}"), "foo{}{bar}");
        assert_eq!(slot_part("lockwise:lock:{a}"), "a");
    }
}
