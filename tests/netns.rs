//! Transparent mode against the real kernel: network namespaces, nftables
//! and iptables rules, a packet tap, as root, around the real binary.
//! tests/README.md maps the modules.

mod common;

/// The areas, one module (file under tests/netns/) each.
mod netns {
    mod transparent;
}
