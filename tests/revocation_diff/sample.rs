//! The handshake sample (filled in below).
