//! Table output: one row per system, then the targets.

use crate::results::{Fig, Row};

pub fn ratio(f: &Option<Fig>) -> String {
    match f {
        Some(f) => format!("{:.0} ({:.2}×)", f.sys, f.sys / f.direct),
        None => "-".into(),
    }
}

pub fn added(f: &Option<Fig>) -> String {
    match f {
        Some(f) => format!("{:.1} (+{:.1})", f.sys, f.sys - f.direct),
        None => "-".into(),
    }
}

pub fn opt(v: Option<f64>, prec: usize) -> String {
    v.map(|v| format!("{v:.prec$}"))
        .unwrap_or_else(|| "-".into())
}

pub fn print_table(rows: &[Row]) {
    let header = [
        "system",
        "bulk MB/s",
        "echo MB/s",
        "p50 µs (+added)",
        "p99 µs (+added)",
        "p99.9 µs (+added)",
        "16-conn rt/s",
        "new conn/s",
        "resumed conn/s",
        "KiB/idle conn",
        "baseline MB",
        "rotation fails",
    ];
    let mut lines: Vec<Vec<String>> = Vec::new();
    // Direct: from the first row that has each figure (every row measured
    // its own; ratios use the row's own).
    let first = |f: fn(&Row) -> Option<Fig>| rows.iter().find_map(f);
    let d = |f: Option<Fig>, p: usize| f.map(|f| format!("{:.p$}", f.direct)).unwrap_or("-".into());
    lines.push(vec![
        "direct".into(),
        d(first(|r| r.bulk), 0),
        d(first(|r| r.echo), 0),
        d(first(|r| r.p50), 1),
        d(first(|r| r.p99), 1),
        d(first(|r| r.p999), 1),
        d(first(|r| r.rt16), 0),
        d(first(|r| r.newconn), 0),
        d(first(|r| r.newconn_resumed), 0),
        "-".into(),
        "-".into(),
        "-".into(),
    ]);
    for r in rows {
        lines.push(vec![
            r.system.clone(),
            ratio(&r.bulk),
            ratio(&r.echo),
            added(&r.p50),
            added(&r.p99),
            added(&r.p999),
            ratio(&r.rt16),
            ratio(&r.newconn),
            ratio(&r.newconn_resumed),
            opt(r.idle_kib, 1),
            opt(r.baseline_mb, 1),
            match (r.rotation_failed, r.rotations) {
                (Some(f), Some(n)) => format!("{f} in {n}"),
                _ => "n/a".into(),
            },
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .chain([header[i].chars().count()])
                .max()
                .unwrap()
        })
        .collect();
    let fmt = |cells: &[String]| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        format!("| {} |", parts.join(" | "))
    };
    let hdr: Vec<String> = header.iter().map(|s| s.to_string()).collect();
    println!("{}", fmt(&hdr));
    println!(
        "|{}|",
        widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("|")
    );
    for l in &lines {
        println!("{}", fmt(l));
    }
    if rows.iter().any(|r| r.quick) {
        println!("(quick mode: small sizes, figures are indicative only)");
    }
    println!(
        "(ratios: system / direct from the same run; latency: +µs over direct; \
         echo: payload MB/s each way; memory: RSS of all proxy processes)"
    );
    print_cpu(rows);
}

/// CPU time of every process of each system per unit of work, from the
/// round whose figure the table above kept.
fn print_cpu(rows: &[Row]) {
    let has = |r: &Row| {
        let c = r.cpu;
        [
            c.bulk_s_per_gib,
            c.echo_s_per_gib,
            c.rt16_us,
            c.newconn_us,
            c.resumed_us,
        ]
        .iter()
        .any(Option::is_some)
    };
    if !rows.iter().any(has) {
        return;
    }
    println!();
    println!(
        "| system | bulk CPU-s/GiB | echo CPU-s/GiB | 16-conn CPU µs/round trip | new conn CPU µs | resumed conn CPU µs |"
    );
    println!("|---|---|---|---|---|---|");
    for r in rows.iter().filter(|r| has(r)) {
        let c = r.cpu;
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            r.system,
            opt(c.bulk_s_per_gib, 2),
            opt(c.echo_s_per_gib, 2),
            opt(c.rt16_us, 1),
            opt(c.newconn_us, 0),
            opt(c.resumed_us, 0)
        );
    }
    println!("(CPU: user + system time of both proxies and their children, all threads)");
}

/// The targets: the sidecar against the best peer (each figure
/// normalised by its own run's direct where it has one).
pub fn print_targets(rows: &[Row]) {
    let Some(us) = rows.iter().find(|r| r.system == "mtls-sidecar") else {
        return;
    };
    let peers: Vec<&Row> = rows
        .iter()
        .filter(|r| {
            // The plaintext pairs are ceilings, not peers.
            r.system != "mtls-sidecar" && !r.system.starts_with("socat") && r.system != "plain-rust"
        })
        .collect();
    if peers.is_empty() {
        return;
    }
    println!();
    println!("| target | mtls-sidecar | best peer | ratio | goal | met | absolute ratio |");
    println!("|---|---|---|---|---|---|---|");
    type Get = fn(&Row) -> Option<f64>;
    let checks: [(&str, Get, bool, f64); 8] = [
        (
            "bulk one way (×direct)",
            |r| r.bulk.map(|f| f.sys / f.direct),
            true,
            1.5,
        ),
        (
            "added p50 µs",
            |r| r.p50.map(|f| f.sys - f.direct),
            false,
            0.7,
        ),
        (
            "added p99 µs",
            |r| r.p99.map(|f| f.sys - f.direct),
            false,
            0.7,
        ),
        (
            "new conn/s (×direct)",
            |r| r.newconn.map(|f| f.sys / f.direct),
            true,
            1.5,
        ),
        (
            "16-conn rt/s (×direct)",
            |r| r.rt16.map(|f| f.sys / f.direct),
            true,
            1.5,
        ),
        ("KiB per idle conn", |r| r.idle_kib, false, 0.5),
        ("baseline RSS MB", |r| r.baseline_mb, false, 0.5),
        (
            "rotation failures",
            |r| r.rotation_failed.map(|f| f as f64),
            false,
            0.0,
        ),
    ];
    for (name, get, higher, goal) in checks {
        let Some(mine) = get(us) else { continue };
        if goal == 0.0 {
            println!(
                "| {name} | {mine:.0} | n/a | - | 0 | {} |",
                if mine == 0.0 { "yes" } else { "NO" }
            );
            continue;
        }
        let best = peers
            .iter()
            .filter_map(|r| get(r).map(|v| (v, *r)))
            .reduce(|a, b| if (b.0 > a.0) == higher { b } else { a });
        let Some((best, peer)) = best else { continue };
        let r = mine / best;
        let met = if higher { r >= goal } else { r <= goal };
        // The same comparison on the raw figures, without each run's direct.
        let raw = |row: &Row| match name {
            n if n.starts_with("bulk") => row.bulk.map(|f| f.sys),
            n if n.starts_with("new conn") => row.newconn.map(|f| f.sys),
            n if n.starts_with("16-conn") => row.rt16.map(|f| f.sys),
            _ => None,
        };
        let absolute = match (raw(us), raw(peer)) {
            (Some(a), Some(b)) => format!("{:.2} ({a:.0} / {b:.0})", a / b),
            _ => "-".into(),
        };
        println!(
            "| {name} | {mine:.2} | {best:.2} ({}) | {r:.2} | {}{goal} | {} | {absolute} |",
            peer.system,
            if higher { "≥" } else { "≤" },
            if met { "yes" } else { "NO" }
        );
    }
}
