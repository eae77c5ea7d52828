//! A request head's header lines, kept in two buffers: every name (lower-cased) in one
//! string, every value in one byte buffer, and where each ends.
//!
//! Three allocations a head whatever its header count, where a `String` and a `Vec` per
//! header took two each: a browser sends a dozen headers, and a gateway reads one head per
//! join (BENCHMARKS.md, "Where the time goes", allocations a join).

/// The header lines of one request head, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Headers {
    names: String,
    values: Vec<u8>,
    /// Each header's end in `names` and in `values`; it starts where the one before ends.
    ends: Vec<(usize, usize)>,
}

impl Headers {
    /// Room for `n` headers of a usual size.
    pub(crate) fn with_capacity(n: usize) -> Self {
        Self {
            names: String::with_capacity(16 * n),
            values: Vec::with_capacity(32 * n),
            ends: Vec::with_capacity(n),
        }
    }

    /// Adds a header (its name lower-cased) and returns the name as stored.
    pub(crate) fn push(&mut self, name: &str, value: &[u8]) -> &str {
        let start = self.names.len();
        self.names.push_str(name);
        self.names[start..].make_ascii_lowercase();
        self.values.extend_from_slice(value);
        self.ends.push((self.names.len(), self.values.len()));
        &self.names[start..]
    }

    /// Each header's lower-case name and raw value, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> + '_ {
        let starts = std::iter::once((0, 0)).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|((n0, v0), (n1, v1))| (&self.names[n0..n1], &self.values[v0..v1]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_come_back_lower_cased_in_order_with_their_values() {
        let mut h = Headers::with_capacity(1);
        assert_eq!(h.push("Host", b"example.test"), "host");
        assert_eq!(h.push("X-Forwarded-For", b"10.0.0.1"), "x-forwarded-for");
        assert_eq!(h.push("x-forwarded-for", b""), "x-forwarded-for");
        assert_eq!(h.push("Accept", b"text/event-stream"), "accept");
        let all: Vec<_> = h.iter().collect();
        assert_eq!(
            all,
            [
                ("host", &b"example.test"[..]),
                ("x-forwarded-for", &b"10.0.0.1"[..]),
                ("x-forwarded-for", &b""[..]),
                ("accept", &b"text/event-stream"[..]),
            ]
        );
        assert_eq!(Headers::default().iter().count(), 0);
    }
}
