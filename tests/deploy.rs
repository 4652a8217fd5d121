//! The deployment files under deploy/ and the Dockerfile, checked for what
//! offline schema validation cannot see: the custom resources'
//! (cert-manager, Prometheus operator) required fields, the sidecar
//! container's probes and hardening, no `subPath` mounts, identities that
//! line up across files, and every command line they contain parsing and
//! validating with the real CLI. scripts/validate-deploy.sh validates the
//! core Kubernetes objects against their schemas.

#[path = "deploy/host.rs"]
mod host;
#[path = "deploy/yaml.rs"]
mod yaml;

use std::collections::BTreeSet;

use clap::Parser;
use mtls_sidecar::cli::{Cli, Command};
use mtls_sidecar::config::FileSpec;
use yaml::{at, manifests, of_kind, strs, text, Doc};
use yaml_rust2::Yaml;

const CERT_MANAGER: &str = "cert-manager.io/v1";
const MONITORING: &str = "monitoring.coreos.com/v1";
const SIDECAR: &str = "mtls-sidecar";

#[test]
fn every_manifest_names_its_kind_and_itself() {
    let docs = manifests();
    assert!(docs.len() >= 10, "expected the full set of manifests");
    for d in &docs {
        assert!(!text(d, "apiVersion").is_empty());
        let kind = text(d, "kind");
        if kind != "Kustomization" {
            assert!(!text(d, "metadata.name").is_empty(), "{}", d.file);
        }
    }
}

#[test]
fn kustomization_lists_files_that_exist_and_leaves_out_the_secret_example() {
    let docs = manifests();
    let k = &of_kind(&docs, "Kustomization")[0];
    let resources = strs(k, "resources");
    for r in &resources {
        assert!(
            yaml::dir().join(r).is_file(),
            "kustomization lists missing {r}"
        );
    }
    assert!(!resources.contains(&"secret-example.yaml".to_string()));
    for must in [
        "issuer.yaml",
        "certificates.yaml",
        "podmonitor.yaml",
        "prometheusrule.yaml",
    ] {
        assert!(
            resources.iter().any(|r| r == must),
            "kustomization lacks {must}"
        );
    }
}

fn role_certificates(docs: &[Doc]) -> Vec<&Doc> {
    of_kind(docs, "Certificate")
        .into_iter()
        .filter(|c| !at(c, "spec.isCA").as_bool().unwrap_or(false))
        .collect()
}

#[test]
fn certificates_have_the_required_fields() {
    let docs = manifests();
    let certs = of_kind(&docs, "Certificate");
    let issuers: BTreeSet<String> = of_kind(&docs, "Issuer")
        .iter()
        .map(|i| text(i, "metadata.name"))
        .collect();
    assert!(!certs.is_empty());
    for c in &certs {
        let name = text(c, "metadata.name");
        assert_eq!(text(c, "apiVersion"), CERT_MANAGER, "{name}");
        assert!(!text(c, "spec.secretName").is_empty(), "{name}: secretName");
        assert_eq!(text(c, "spec.issuerRef.kind"), "Issuer", "{name}");
        assert_eq!(text(c, "spec.issuerRef.group"), "cert-manager.io", "{name}");
        let issuer = text(c, "spec.issuerRef.name");
        assert!(
            issuers.contains(&issuer),
            "{name}: issuerRef {issuer} is not defined"
        );
        assert_eq!(text(c, "spec.privateKey.algorithm"), "ECDSA", "{name}");
        assert_eq!(
            at(c, "spec.privateKey.size").as_i64(),
            Some(256),
            "{name}: P-256"
        );
        assert_eq!(
            text(c, "spec.privateKey.rotationPolicy"),
            "Always",
            "{name}"
        );
        assert!(
            !strs(c, "spec.usages").is_empty(),
            "{name}: explicit usages"
        );
    }
}

#[test]
fn the_two_role_certificates_have_distinct_sans_and_one_usage_each() {
    let docs = manifests();
    let roles = role_certificates(&docs);
    assert_eq!(roles.len(), 2, "one server and one client identity");
    let mut seen_usage = BTreeSet::new();
    let mut all_sans = BTreeSet::new();
    for c in roles {
        let name = text(c, "metadata.name");
        let usages = strs(c, "spec.usages");
        let auth: Vec<_> = usages.iter().filter(|u| u.ends_with(" auth")).collect();
        assert_eq!(
            auth.len(),
            1,
            "{name}: exactly one of server/client auth: {usages:?}"
        );
        assert!(usages.contains(&"digital signature".to_string()), "{name}");
        seen_usage.insert(auth[0].clone());
        let sans = strs(c, "spec.dnsNames");
        assert!(!sans.is_empty(), "{name}: a role DNS SAN");
        for s in sans {
            assert!(
                all_sans.insert(s.clone()),
                "{name}: SAN {s} shared with the other role"
            );
        }
    }
    assert_eq!(
        seen_usage,
        BTreeSet::from(["client auth".to_string(), "server auth".to_string()])
    );
}

#[test]
fn issuers_form_a_private_ca() {
    let docs = manifests();
    let issuers = of_kind(&docs, "Issuer");
    assert!(issuers.len() >= 2);
    for i in &issuers {
        assert_eq!(text(i, "apiVersion"), CERT_MANAGER);
        let spec = at(i, "spec").as_hash().expect("Issuer spec");
        assert_eq!(
            spec.len(),
            1,
            "{}: one issuer type",
            text(i, "metadata.name")
        );
    }
    let ca_cert = of_kind(&docs, "Certificate")
        .into_iter()
        .find(|c| at(c, "spec.isCA").as_bool() == Some(true))
        .expect("a CA Certificate");
    assert!(strs(ca_cert, "spec.usages").contains(&"cert sign".to_string()));
    let ca_secret = text(ca_cert, "spec.secretName");
    let ca_issuer = issuers
        .iter()
        .find(|i| at(i, "spec.ca.secretName").as_str() == Some(ca_secret.as_str()))
        .expect("a CA Issuer signing with the CA Certificate's Secret");
    // The role identities come from the private CA, not the bootstrap
    // self-signed issuer.
    for c in role_certificates(&docs) {
        assert_eq!(
            text(c, "spec.issuerRef.name"),
            text(ca_issuer, "metadata.name"),
            "{}",
            text(c, "metadata.name")
        );
    }
}

#[test]
fn pod_monitor_selects_both_workloads_on_the_admin_port() {
    let docs = manifests();
    let pm = of_kind(&docs, "PodMonitor");
    assert_eq!(pm.len(), 1);
    let pm = pm[0];
    assert_eq!(text(pm, "apiVersion"), MONITORING);
    let selector = at(pm, "spec.selector.matchLabels")
        .as_hash()
        .expect("spec.selector.matchLabels");
    assert!(!selector.is_empty());
    let endpoints = at(pm, "spec.podMetricsEndpoints")
        .as_vec()
        .expect("podMetricsEndpoints");
    assert!(!endpoints.is_empty());
    for e in endpoints {
        assert_eq!(e["path"].as_str(), Some("/metrics"));
        assert!(e["port"].as_str().is_some(), "a named port");
    }
    let port = endpoints[0]["port"].as_str().unwrap();
    for w in workloads(&docs) {
        let labels = at(w, "spec.template.metadata.labels").as_hash().unwrap();
        for (k, v) in selector {
            assert_eq!(labels.get(k), Some(v), "{}: pod labels miss {k:?}", w.file);
        }
        let sidecar = sidecar(w);
        let ports: Vec<_> = sidecar["ports"]
            .as_vec()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str())
            .collect();
        assert!(
            ports.contains(&Some(port)),
            "{}: sidecar has no port {port}",
            w.file
        );
    }
}

#[test]
fn prometheus_rules_have_the_required_fields() {
    let docs = manifests();
    let rules = of_kind(&docs, "PrometheusRule");
    assert!(!rules.is_empty(), "deploy/kubernetes/prometheusrule.yaml");
    for r in rules {
        assert_eq!(text(r, "apiVersion"), MONITORING);
        assert!(!text(r, "metadata.name").is_empty());
        let groups = at(r, "spec.groups").as_vec().expect("spec.groups");
        assert!(!groups.is_empty());
        for g in groups {
            let gname = g["name"].as_str().expect("group name");
            let list = g["rules"]
                .as_vec()
                .unwrap_or_else(|| panic!("group {gname}: rules"));
            assert!(!list.is_empty(), "group {gname}");
            for rule in list {
                let named = rule["alert"].as_str().or(rule["record"].as_str());
                assert!(
                    named.is_some(),
                    "group {gname}: a rule without alert/record"
                );
                assert!(rule["expr"].as_str().is_some(), "{named:?}: expr");
            }
        }
    }
}

fn workloads(docs: &[Doc]) -> Vec<&Doc> {
    let mut w = of_kind(docs, "StatefulSet");
    w.extend(of_kind(docs, "Deployment"));
    assert_eq!(w.len(), 2, "a replica and a controller workload");
    w
}

fn sidecar(w: &Doc) -> &Yaml {
    let inits = at(w, "spec.template.spec.initContainers").as_vec();
    inits
        .and_then(|v| v.iter().find(|c| c["name"].as_str() == Some(SIDECAR)))
        .unwrap_or_else(|| panic!("{}: no init container named {SIDECAR}", w.file))
}

#[test]
fn the_sidecar_is_a_hardened_native_sidecar_with_probes() {
    let docs = manifests();
    for w in workloads(&docs) {
        let f = &w.file;
        let c = sidecar(w);
        assert_eq!(
            c["restartPolicy"].as_str(),
            Some("Always"),
            "{f}: native sidecar"
        );
        let admin_port = c["ports"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|p| p["name"].as_str() == Some("admin"))
            .unwrap_or_else(|| panic!("{f}: an admin port"));
        assert_eq!(admin_port["containerPort"].as_i64(), Some(9901));
        for (probe, path) in [
            ("startupProbe", "/readyz"),
            ("readinessProbe", "/readyz"),
            ("livenessProbe", "/livez"),
        ] {
            let get = &c[probe]["httpGet"];
            assert_eq!(get["path"].as_str(), Some(path), "{f}: {probe}");
            assert_eq!(get["port"].as_str(), Some("admin"), "{f}: {probe} port");
        }
        let sc = &c["securityContext"];
        assert_eq!(sc["runAsNonRoot"].as_bool(), Some(true), "{f}");
        assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true), "{f}");
        assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false), "{f}");
        let drop = sc["capabilities"]["drop"]
            .as_vec()
            .expect("capabilities.drop");
        assert!(drop.iter().any(|d| d.as_str() == Some("ALL")), "{f}");
        assert_eq!(
            sc["seccompProfile"]["type"].as_str(),
            Some("RuntimeDefault"),
            "{f}"
        );
        for bound in ["requests", "limits"] {
            for r in ["cpu", "memory"] {
                assert!(
                    c["resources"][bound][r].as_str().is_some(),
                    "{f}: resources.{bound}.{r}"
                );
            }
        }
        // The credentials: a whole Secret volume, read-only.
        let mounts = c["volumeMounts"].as_vec().expect("volumeMounts");
        let tls = mounts
            .iter()
            .find(|m| m["mountPath"].as_str() == Some("/etc/mtls"))
            .unwrap_or_else(|| panic!("{f}: /etc/mtls mount"));
        assert_eq!(tls["readOnly"].as_bool(), Some(true));
        let vol_name = tls["name"].as_str().unwrap();
        let vols = at(w, "spec.template.spec.volumes").as_vec().unwrap();
        let vol = vols
            .iter()
            .find(|v| v["name"].as_str() == Some(vol_name))
            .unwrap();
        assert!(
            vol["secret"]["secretName"].as_str().is_some(),
            "{f}: a Secret volume"
        );
    }
}

#[test]
fn no_container_mounts_a_sub_path() {
    let docs = manifests();
    for w in workloads(&docs) {
        for list in ["initContainers", "containers"] {
            let Some(cs) = at(w, &format!("spec.template.spec.{list}")).as_vec() else {
                continue;
            };
            for c in cs {
                for m in c["volumeMounts"].as_vec().into_iter().flatten() {
                    for key in ["subPath", "subPathExpr"] {
                        assert!(
                            m[key].is_badvalue(),
                            "{}: {key} mount in {:?}",
                            w.file,
                            c["name"]
                        );
                    }
                }
            }
        }
    }
}

fn args(c: &Yaml) -> Vec<String> {
    let mut v = vec!["mtls-sidecar".to_string()];
    v.extend(
        c["args"]
            .as_vec()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string()),
    );
    v
}

/// The secret a workload's sidecar mounts.
fn secret_of(w: &Doc) -> String {
    let vols = at(w, "spec.template.spec.volumes").as_vec().unwrap();
    vols.iter()
        .find_map(|v| v["secret"]["secretName"].as_str())
        .unwrap()
        .to_string()
}

/// The DNS SANs of the Certificate that writes `secret`.
fn sans_of_secret(docs: &[Doc], secret: &str) -> Vec<String> {
    let c = of_kind(docs, "Certificate")
        .into_iter()
        .find(|c| text(c, "spec.secretName") == secret)
        .unwrap_or_else(|| panic!("no Certificate writes Secret {secret}"));
    strs(c, "spec.dnsNames")
}

#[test]
fn sidecar_command_lines_parse_and_the_identities_line_up() {
    let docs = manifests();
    let replica = &of_kind(&docs, "StatefulSet")[0];
    let controller = &of_kind(&docs, "Deployment")[0];
    let replica_sans = sans_of_secret(&docs, &secret_of(replica));
    let controller_sans = sans_of_secret(&docs, &secret_of(controller));
    // The plain-Secret alternative writes the same Secrets.
    let plain: Vec<_> = of_kind(&docs, "Secret")
        .iter()
        .map(|s| text(s, "metadata.name"))
        .collect();
    assert!(plain.contains(&secret_of(replica)) && plain.contains(&secret_of(controller)));

    // Replica: a server sidecar that admits exactly the controller's SAN.
    let cli = Cli::try_parse_from(args(sidecar(replica))).expect("server args parse");
    let Command::Server(server) = cli.command else {
        panic!("the replica runs `server`")
    };
    let settings = server.to_spec().validate().expect("server args validate");
    assert_eq!(server.allow_san, controller_sans);
    assert!(!server.allow_any_san);
    assert_eq!(
        settings.admin.map(|a| a.to_string()).as_deref(),
        Some("0.0.0.0:9901")
    );

    // Controller: `run --config` with the ConfigMap's file; every route
    // expects the replica's SAN.
    let cli = Cli::try_parse_from(args(sidecar(controller))).expect("run args parse");
    let Command::Run(run) = cli.command else {
        panic!("the controller runs `run --config`")
    };
    let cm = of_kind(&docs, "ConfigMap")
        .into_iter()
        .find(|c| !at(c, "data").is_badvalue())
        .expect("the sidecar ConfigMap");
    let file = run.config.file_name().unwrap().to_str().unwrap();
    let toml_text = cm.y["data"][file]
        .as_str()
        .unwrap_or_else(|| panic!("ConfigMap lacks {file}"));
    let spec: FileSpec = toml::from_str(toml_text).expect("sidecar.toml in the ConfigMap parses");
    let settings = spec.validate().expect("and validates");
    assert!(settings.routes.len() >= 2);
    for r in &settings.routes {
        assert_eq!(r.mode, mtls_sidecar::config::Mode::Client);
        let expected: Vec<String> = r
            .peer_sans
            .patterns()
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(expected, replica_sans, "route {}", r.name);
    }
}
