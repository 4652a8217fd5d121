//! Anchors leaving the trust: a CA dropped from a bundle (`ca.crt`, or a
//! Workload API bundle, federated ones included) stays trusted for
//! `--trust-grace`, then retires into the bounded history CRLs are
//! recognised against.

use std::sync::Arc;
use std::time::SystemTime;

use rustls_pki_types::CertificateDer;

use super::trust::{Anchor, Trust, MAX_RETIRED};
use crate::identity::CertInfo;

/// What a trust knows of the CA keys it no longer lists, for the trust
/// that replaces it: the retired history and the intermediates held before.
#[derive(Debug, Clone)]
pub struct History {
    pub retired: Arc<[CertificateDer<'static>]>,
    pub former: Arc<[CertificateDer<'static>]>,
}

/// True when the certificate `der` has expired at `now` (one that does not
/// parse counts as expired: it vouches for nothing).
fn expired(der: &CertificateDer<'_>, now: SystemTime) -> bool {
    CertInfo::parse(der).map_or(true, |i| i.not_after_time() < now)
}

/// The newest `MAX_RETIRED` of `v` (oldest first).
fn newest(mut v: Vec<CertificateDer<'static>>) -> Arc<[CertificateDer<'static>]> {
    let excess = v.len().saturating_sub(MAX_RETIRED);
    Arc::from(v.split_off(excess))
}

impl Trust {
    /// The history once `anchors` and `intermediates` replace this
    /// trust's at `now`: the retired anchors
    /// ([`retired_after`](Self::retired_after)), and every intermediate this trust held
    /// (listed or held before) that `intermediates` lacks: kept as held
    /// before while its certificate is valid, retired once it expired
    /// (its leaves no longer chain; its CRL is then ignored).
    pub fn history_after(
        &self,
        anchors: &[Anchor],
        intermediates: &[CertificateDer<'static>],
        now: SystemTime,
    ) -> History {
        let mut retired = self.retired_after(anchors).to_vec();
        let mut former = Vec::new();
        for der in self.former.iter().chain(self.intermediates.iter()) {
            if intermediates.contains(der) || former.contains(der) || retired.contains(der) {
                continue;
            }
            match expired(der, now) {
                true => retired.push(der.clone()),
                false => former.push(der.clone()),
            }
        }
        History {
            retired: newest(retired),
            former: newest(former),
        }
    }

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
        newest(retired)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::CrlSet;
    use crate::pki::DevCa;
    use rustls_pki_types::pem::PemObject;
    use std::time::Duration;

    fn der(ca: &DevCa) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(ca.cert_pem.as_bytes()).unwrap()
    }

    fn trust(root: &DevCa, intermediates: Vec<CertificateDer<'static>>) -> Trust {
        let d = der(root);
        let info = CertInfo::parse(&d).unwrap();
        let empty = Arc::new(CrlSet::empty());
        let provider = crate::tls::provider::crypto_provider();
        Trust::build(
            Anchor::bundle(&[(d, info)]),
            empty,
            Default::default(),
            &provider,
        )
        .unwrap()
        .with_issuers(Arc::from(intermediates), Arc::from(Vec::new()))
    }

    /// A certificate is still valid at its notAfter second (RFC 5280:
    /// the validity period includes it) and expired just after.
    #[test]
    fn a_certificate_expires_after_its_not_after() {
        let d = der(&DevCa::new("A", 1).unwrap());
        let end = CertInfo::parse(&d).unwrap().not_after_time();
        assert!(!expired(&d, end));
        assert!(expired(&d, end + Duration::from_secs(1)));
        assert!(expired(&CertificateDer::from(vec![0u8; 3]), end));
    }

    /// An intermediate the next revision no longer lists is held before
    /// while valid, and retired once expired; one still listed is
    /// neither; the history holds the newest `MAX_RETIRED`.
    #[test]
    fn intermediates_left_behind_are_held_before_until_they_expire() {
        let root = DevCa::new("R", 30).unwrap();
        let (i, i2) = (
            der(&root.intermediate("I", 1).unwrap()),
            der(&root.intermediate("I", 1).unwrap()),
        );
        let t = trust(&root, vec![i.clone(), i2.clone()]);
        let now = SystemTime::now();
        let h = t.history_after(&t.anchors, std::slice::from_ref(&i2), now);
        assert_eq!((&*h.former, &*h.retired), (&[i.clone()][..], &[][..]));
        let anchors = t.anchors.clone();
        let later = t.with_former(h.former);
        let h = later.history_after(&later.anchors, std::slice::from_ref(&i2), now);
        assert_eq!(&*h.former, &[i.clone()][..], "carried, not doubled");
        let h = later.history_after(&anchors, &[i2], now + Duration::from_secs(2 * 86_400));
        assert_eq!(
            (&*h.former, &*h.retired),
            (&[][..], &[i][..]),
            "retired once expired"
        );
        let many: Vec<_> = (0..MAX_RETIRED + 2)
            .map(|_| der(&root.intermediate("I", 1).unwrap()))
            .collect();
        let t = trust(&root, many.clone());
        let h = t.history_after(&anchors, &[], now);
        assert_eq!(&*h.former, &many[2..]);
    }
}
