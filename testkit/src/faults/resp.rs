//! RESP framing for the proxy: where a RESP2 / RESP3 frame ends (replies, push frames,
//! attributes), and a client request's name and arguments (a RESP array of bulk strings,
//! or an inline command).

fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| from + i)
}

fn parse_int(bytes: &[u8]) -> Result<i64, ()> {
    std::str::from_utf8(bytes)
        .map_err(|_| ())?
        .parse()
        .map_err(|_| ())
}

/// The end of the complete RESP2 / RESP3 frame at `pos`: `Ok(None)` if incomplete, `Err` if
/// not understood (streamed types, garbage).
pub(super) fn frame_end(buf: &[u8], pos: usize) -> Result<Option<usize>, ()> {
    if pos >= buf.len() {
        return Ok(None);
    }
    let kind = buf[pos];
    let Some(eol) = line_end(buf, pos + 1) else {
        return Ok(None);
    };
    let header = &buf[pos + 1..eol];
    let after = eol + 2;
    match kind {
        b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => Ok(Some(after)),
        b'$' | b'!' | b'=' => {
            let n = parse_int(header)?;
            if n < 0 {
                return Ok(Some(after));
            }
            let end = after + n as usize + 2;
            Ok((buf.len() >= end).then_some(end))
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = parse_int(header)?;
            if n < 0 {
                return Ok(Some(after));
            }
            let count = if matches!(kind, b'%' | b'|') {
                2 * n
            } else {
                n
            };
            let mut p = after;
            for _ in 0..count {
                match frame_end(buf, p)? {
                    Some(e) => p = e,
                    None => return Ok(None),
                }
            }
            if kind == b'|' {
                // An attribute travels with the frame it precedes.
                frame_end(buf, p)
            } else {
                Ok(Some(p))
            }
        }
        _ => Err(()),
    }
}

/// A parsed request: `Ok(None)` incomplete, `Err` not understood.
type Parsed = Result<Option<(usize, Vec<Vec<u8>>)>, ()>;

/// One client request at the start of `buf`: (its length, name and arguments). A RESP array
/// of bulk strings, or an inline command line.
pub(super) fn parse_request(buf: &[u8]) -> Parsed {
    if buf.first() != Some(&b'*') {
        let Some(eol) = line_end(buf, 0) else {
            return Ok(None);
        };
        let args = buf[..eol]
            .split(|b| b.is_ascii_whitespace())
            .filter(|a| !a.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        return Ok(Some((eol + 2, args)));
    }
    let Some(eol) = line_end(buf, 1) else {
        return Ok(None);
    };
    let n = parse_int(&buf[1..eol])?;
    let mut p = eol + 2;
    let mut args = Vec::new();
    for _ in 0..n.max(0) {
        if p >= buf.len() {
            return Ok(None);
        }
        if buf[p] != b'$' {
            return Err(());
        }
        let Some(eol) = line_end(buf, p + 1) else {
            return Ok(None);
        };
        let len = parse_int(&buf[p + 1..eol])?;
        if len < 0 {
            return Err(());
        }
        let start = eol + 2;
        let end = start + len as usize;
        if buf.len() < end + 2 {
            return Ok(None);
        }
        args.push(buf[start..end].to_vec());
        p = end + 2;
    }
    Ok(Some((p, args)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp3_frames() {
        let frames: &[&[u8]] = &[
            b"+OK\r\n",
            b"$-1\r\n",
            b"_\r\n",
            b"#t\r\n",
            b",1.5\r\n",
            b"(12345678901234567890\r\n",
            b"=15\r\ntxt:Some string\r\n",
            b"!10\r\nERR thing!\r\n",
            b"%2\r\n+a\r\n:1\r\n+b\r\n*2\r\n:1\r\n$1\r\nx\r\n",
            b"~2\r\n:1\r\n:2\r\n",
            b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\n*\r\n",
            b"|1\r\n+key\r\n+val\r\n*1\r\n:1\r\n",
            b"*-1\r\n",
        ];
        for f in frames {
            assert_eq!(
                frame_end(f, 0),
                Ok(Some(f.len())),
                "{}",
                String::from_utf8_lossy(f)
            );
            assert_eq!(frame_end(&f[..f.len() - 1], 0), Ok(None));
        }
        assert_eq!(frame_end(b"$?\r\n", 0), Err(()));
    }

    #[test]
    fn requests() {
        let r = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n";
        let (len, args) = parse_request(r).unwrap().unwrap();
        assert_eq!(args, vec![b"GET".to_vec(), b"k".to_vec()]);
        let (len2, args) = parse_request(&r[len..]).unwrap().unwrap();
        assert_eq!(args, vec![b"PING".to_vec()]);
        assert_eq!(len + len2, r.len());
        assert_eq!(parse_request(&r[..10]), Ok(None));
    }
}
