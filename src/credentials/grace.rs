//! Anchors leaving the trust: a CA dropped from a bundle (`ca.crt`, or a
//! Workload API bundle, federated ones included) stays trusted for
//! `--trust-grace`, then retires into the bounded history CRLs are
//! recognised against.

use std::sync::Arc;
use std::time::SystemTime;

use rustls_pki_types::CertificateDer;

use super::trust::{Anchor, Trust, MAX_RETIRED};
use crate::identity::CertInfo;

impl Trust {
    /// The retired-anchor history once `next` replaces the anchors: every
    /// anchor not in `next` joins it, the oldest leave past
    /// `MAX_RETIRED`.
    pub fn retired_after(&self, next: &[Anchor]) -> Arc<[CertificateDer<'static>]> {
        let mut retired: Vec<_> = self
            .retired
            .iter()
            .filter(|r| !next.iter().any(|a| &a.der == *r))
            .cloned()
            .collect();
        for a in &self.anchors {
            if !next.iter().any(|n| n.der == a.der) && !retired.contains(&a.der) {
                retired.push(a.der.clone());
            }
        }
        let excess = retired.len().saturating_sub(MAX_RETIRED);
        Arc::from(retired.split_off(excess))
    }

    /// The anchors for a new `ca.crt` bundle: all of the bundle, plus every
    /// current anchor the bundle dropped, kept until `now + grace` (or its
    /// earlier retirement). Returns the list and whether trust shrank.
    pub fn merge(
        &self,
        bundle: &[(CertificateDer<'static>, CertInfo)],
        grace: std::time::Duration,
        now: SystemTime,
    ) -> (Vec<Anchor>, bool) {
        self.merge_anchors(Anchor::bundle(bundle), grace, now)
    }

    /// Like [`merge`](Self::merge) for anchors of any trust domain: an
    /// anchor counts as kept only in the same trust domain's bundle, so an
    /// anchor dropped from a federated bundle (or a whole federated bundle
    /// removed) is graced and then retired like one dropped from `ca.crt`.
    pub fn merge_anchors(
        &self,
        mut next: Vec<Anchor>,
        grace: std::time::Duration,
        now: SystemTime,
    ) -> (Vec<Anchor>, bool) {
        let mut shrank = false;
        for old in &self.anchors {
            if next.iter().any(|a| a.same_as(old)) {
                continue;
            }
            let retire_at = old.retire_at.unwrap_or(now + grace);
            if retire_at > now {
                next.push(Anchor {
                    retire_at: Some(retire_at),
                    ..old.clone()
                });
            } else {
                shrank = true;
            }
        }
        (next, shrank)
    }

    /// The anchors left once every retirement due by `now` has happened, or
    /// `None` when nothing is due.
    pub fn expire(&self, now: SystemTime) -> Option<Vec<Anchor>> {
        if !self
            .anchors
            .iter()
            .any(|a| a.retire_at.is_some_and(|t| t <= now))
        {
            return None;
        }
        Some(
            self.anchors
                .iter()
                .filter(|a| a.retire_at.is_none_or(|t| t > now))
                .cloned()
                .collect(),
        )
    }

    /// The earliest pending retirement, so a poller can wake for it.
    pub fn next_retirement(&self) -> Option<SystemTime> {
        self.anchors.iter().filter_map(|a| a.retire_at).min()
    }
}
