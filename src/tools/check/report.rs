//! The result of `check`: one entry per check, printed as aligned text for
//! people or as JSON for scripts (the field names are the stable interface).

use serde::Serialize;

use crate::identity::CertInfo;

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    /// Not run because a check it depends on failed.
    Skip,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Skip => "SKIP",
        }
    }
}

/// One check: what was checked, on what, and why it passed or failed.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Stable identifier: (with `--secret`: `secret`, `type`), `present`,
    /// `pem`, `parse`, `key_match`, `chain`, `validity`, `min_validity`,
    /// `role`, `san`, `load`.
    pub name: &'static str,
    /// The file (`cert`, `key`, `ca`) or SAN the check is about, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    pub status: Status,
    /// The reason, naming the file and the problem.
    pub detail: String,
}

/// Every check that ran (or was skipped), in order.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// True when no check failed.
    pub ok: bool,
    /// The directory or the three files checked.
    pub source: String,
    pub checks: Vec<Check>,
    /// The leaf certificate's facts, when it parsed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate: Option<CertInfo>,
}

impl Report {
    pub(super) fn new(source: String) -> Report {
        Report {
            ok: true,
            source,
            checks: Vec::new(),
            certificate: None,
        }
    }

    pub(super) fn push(
        &mut self,
        name: &'static str,
        subject: Option<&str>,
        status: Status,
        detail: impl Into<String>,
    ) {
        if status == Status::Fail {
            self.ok = false;
        }
        self.checks.push(Check {
            name,
            subject: subject.map(str::to_string),
            status,
            detail: detail.into(),
        });
    }

    /// The check with this name (and subject, when given), for tests.
    pub fn find(&self, name: &str, subject: Option<&str>) -> Option<&Check> {
        self.checks
            .iter()
            .find(|c| c.name == name && (subject.is_none() || c.subject.as_deref() == subject))
    }

    /// One line per check, then a summary line.
    pub fn to_text(&self) -> String {
        let labels: Vec<String> = self.checks.iter().map(label).collect();
        let width = labels.iter().map(String::len).max().unwrap_or(0);
        let mut out = format!("checking {}\n", self.source);
        for (c, l) in self.checks.iter().zip(&labels) {
            out.push_str(&format!(
                "{}  {l:<width$}  {}\n",
                c.status.label(),
                c.detail
            ));
        }
        let count = |s| self.checks.iter().filter(|c| c.status == s).count();
        let (failed, skipped) = (count(Status::Fail), count(Status::Skip));
        if self.ok {
            out.push_str(&format!("OK: all {} checks passed\n", self.checks.len()));
        } else {
            out.push_str(&format!(
                "FAILED: {failed} of {} checks failed, {skipped} skipped\n",
                self.checks.len()
            ));
        }
        out
    }
}

fn label(c: &Check) -> String {
    let name = c.name.replace('_', "-");
    match &c.subject {
        Some(s) => format!("{name} {s}"),
        None => name,
    }
}
