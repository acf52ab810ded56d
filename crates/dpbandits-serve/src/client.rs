//! A minimal blocking HTTP/1.1 client over `std::net::TcpStream` (one request per connection,
//! or a keep-alive [`Conn`]), for tests and the benchmark: no extra dependency.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A response: status, `Retry-After` if any, body.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// The `Retry-After` header, if sent.
    pub retry_after: Option<String>,
    /// The body as text.
    pub body: String,
}

impl Reply {
    /// The body parsed as JSON (`Null` if it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// Send one request; `token` goes in `Authorization: Bearer`. Times out after `timeout`.
///
/// # Errors
/// Connection failures, timeouts, or a response that is not HTTP/1.1.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
    timeout: Duration,
) -> std::io::Result<Reply> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.set_nodelay(true)?;
    s.write_all(&encode(method, path, addr, token, body, true))?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    parse(&buf)
}

/// A keep-alive connection: requests go over one TCP connection (reconnected when the server
/// closed it while idle). For benchmarks and tests; no pipelining, `Content-Length` answers only.
#[derive(Debug)]
pub struct Conn {
    addr: SocketAddr,
    timeout: Duration,
    stream: Option<TcpStream>,
}

impl Conn {
    /// A connection to `addr` (opened at the first request).
    pub fn new(addr: SocketAddr, timeout: Duration) -> Conn {
        Conn {
            addr,
            timeout,
            stream: None,
        }
    }

    fn open(&mut self) -> std::io::Result<&mut TcpStream> {
        if self.stream.is_none() {
            let s = TcpStream::connect_timeout(&self.addr, self.timeout)?;
            s.set_read_timeout(Some(self.timeout))?;
            s.set_write_timeout(Some(self.timeout))?;
            s.set_nodelay(true)?;
            self.stream = Some(s);
        }
        Ok(self.stream.as_mut().expect("just opened"))
    }

    /// Send one request and read its answer. A connection the server closed while idle (the
    /// write fails, or the answer is empty) is reopened and the request sent once more: only
    /// when no byte of an answer arrived, so the server never saw it complete.
    ///
    /// # Errors
    /// Connection failures, timeouts, or an answer that is not HTTP/1.1 with `Content-Length`.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&[u8]>,
    ) -> std::io::Result<Reply> {
        let req = encode(method, path, self.addr, token, body, false);
        for attempt in 0..2 {
            let fresh = self.stream.is_none();
            let s = self.open()?;
            let sent = s.write_all(&req);
            let answer = match sent {
                Ok(()) => read_answer(s),
                Err(e) => Err(e),
            };
            match answer {
                Ok(Some(r)) => return Ok(r),
                Ok(None) | Err(_) if !fresh && attempt == 0 => {
                    self.stream = None; // stale: reopen and send once more
                }
                Ok(None) => {
                    self.stream = None;
                    return Err(bad("the server closed the connection without an answer"));
                }
                Err(e) => {
                    self.stream = None;
                    return Err(e);
                }
            }
        }
        Err(bad("no answer"))
    }
}

/// Read one `Content-Length` answer; `None` when the connection closed before any byte.
fn read_answer(s: &mut TcpStream) -> std::io::Result<Option<Reply>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let split = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(bad("connection closed inside the headers"))
            };
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..split]).map_err(|_| bad("headers not UTF-8"))?;
    let len: usize = head
        .split("\r\n")
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())
                .flatten()
        })
        .ok_or_else(|| bad("no Content-Length"))?;
    while buf.len() < split + 4 + len {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(bad("connection closed inside the body"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    parse(&buf[..split + 4 + len]).map(Some)
}

/// One request's bytes: the request line, `Host`, `Connection: close` when `close`,
/// `Content-Length`, the JSON content type when there is a body, the bearer token, the body.
fn encode(
    method: &str,
    path: &str,
    addr: SocketAddr,
    token: Option<&str>,
    body: Option<&[u8]>,
    close: bool,
) -> Vec<u8> {
    let body = body.unwrap_or(b"");
    // Appended piece by piece (a benchmark's clients share the server's cores).
    let mut req = Vec::with_capacity(160 + path.len() + body.len());
    let mut put = |s: &str| req.extend_from_slice(s.as_bytes());
    put(method);
    put(" ");
    put(path);
    put(" HTTP/1.1\r\nHost: ");
    put(&addr.to_string());
    put("\r\n");
    if close {
        put("Connection: close\r\n");
    }
    put("Content-Length: ");
    put(&body.len().to_string());
    put("\r\n");
    if !body.is_empty() {
        put("Content-Type: application/json\r\n");
    }
    if let Some(t) = token {
        put("Authorization: Bearer ");
        put(t);
        put("\r\n");
    }
    put("\r\n");
    req.extend_from_slice(body);
    req
}

fn bad(msg: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.to_string())
}

fn parse(buf: &[u8]) -> std::io::Result<Reply> {
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = std::str::from_utf8(&buf[..split]).map_err(|_| bad("headers not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status line"))?;
    let mut retry_after = None;
    let mut chunked = false;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("retry-after") {
                retry_after = Some(v.trim().to_string());
            }
            if k.eq_ignore_ascii_case("transfer-encoding")
                && v.trim().eq_ignore_ascii_case("chunked")
            {
                chunked = true;
            }
        }
    }
    let raw = &buf[split + 4..];
    let body = if chunked { dechunk(raw)? } else { raw.to_vec() };
    Ok(Reply {
        status,
        retry_after,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn dechunk(mut raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| bad("truncated chunk"))?;
        let size = usize::from_str_radix(
            std::str::from_utf8(&raw[..eol])
                .map_err(|_| bad("chunk size"))?
                .trim(),
            16,
        )
        .map_err(|_| bad("chunk size"))?;
        raw = &raw[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if raw.len() < size + 2 {
            return Err(bad("truncated chunk"));
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

/// Send `bytes` as they are (a malformed, partial or oversized request) on a new connection
/// and read until the server closes it or `wait` passes: what was read, whether the server
/// closed the connection (a reset counts as closed), and the time that took.
///
/// # Errors
/// The connection cannot be made or written to.
pub fn raw_exchange(
    addr: SocketAddr,
    bytes: &[u8],
    wait: Duration,
) -> std::io::Result<(String, bool, Duration)> {
    let t = std::time::Instant::now();
    let mut c = TcpStream::connect(addr)?;
    c.set_read_timeout(Some(Duration::from_millis(100)))?;
    c.write_all(bytes)?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match c.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break true,
        }
        if t.elapsed() > wait {
            break false;
        }
    };
    Ok((
        String::from_utf8_lossy(&out).into_owned(),
        closed,
        t.elapsed(),
    ))
}

/// The status and JSON error body of a raw HTTP/1.1 answer (a `Content-Length` body, as
/// [`raw_exchange`] reads it).
///
/// # Errors
/// No answer, a status line without a number, a content type other than JSON, or a body that
/// is not a JSON object with an `"error"` string (the message names which).
pub fn error_answer(text: &str) -> Result<(u16, serde_json::Value), String> {
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no answer: {text:?}"))?;
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status: {text:?}"))?;
    if !head
        .to_ascii_lowercase()
        .contains("content-type: application/json")
    {
        return Err(format!("not JSON: {text}"));
    }
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("{e}: {text}"))?;
    if !v["error"].is_string() {
        return Err(format!("no error message: {text}"));
    }
    Ok((status, v))
}
