//! The deployment files under deploy/ and the Dockerfile, checked for what
//! offline schema validation cannot see: the custom resources'
//! (cert-manager, Prometheus operator) required fields, the sidecar
//! container's probes and hardening, no `subPath` mounts, identities that
//! line up across files, and every command line they contain parsing and
//! validating with the real CLI, the image's paths (deploy/image.rs) and
//! the sizing figures (deploy/sizing.rs). The example workloads are
//! annotated pod templates; the tests judge them as the binary's `inject`
//! renders them (deploy/yaml.rs). scripts/validate-deploy.sh
//! validates the core Kubernetes objects against their schemas, and
//! scripts/deploy-checks/admission.py what admission would refuse.

mod host;
mod image;
mod injector;
mod sizing;
mod yaml;

use std::collections::BTreeSet;

use clap::Parser;
use mtls_sidecar::cli::{Cli, Command};
use mtls_sidecar::config::FileSpec;
use mtls_sidecar::tools::inject::annotations::INJECTED_LABEL;
use mtls_sidecar::tools::inject::sidecar::PORT_ADMIN;
use yaml::{at, manifests, of_kind, strs, text, Doc};
use yaml_rust2::{Yaml, YamlLoader};

const CERT_MANAGER: &str = "cert-manager.io/v1";
const MONITORING: &str = "monitoring.coreos.com/v1";
const SIDECAR: &str = "mtls-sidecar";

#[test]
fn every_manifest_names_its_kind_and_itself() {
    let docs = manifests();
    assert!(docs.len() >= 15, "expected the full set of manifests");
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
    for k in of_kind(&docs, "Kustomization") {
        let base = yaml::dir().join(&k.file).parent().unwrap().to_path_buf();
        for r in strs(k, "resources") {
            assert!(base.join(&r).is_file(), "{}: lists missing {r}", k.file);
        }
    }
    let k = root_kustomization(&docs);
    let resources = strs(k, "resources");
    assert!(!resources.contains(&"secret-example.yaml".to_string()));
    // The CA is not part of the workload namespace's kustomization.
    assert!(!resources
        .iter()
        .any(|r| r == "ca.yaml" || r.starts_with("pki")));
    for must in [
        "certificates.yaml",
        "networkpolicy.yaml",
        "podmonitor.yaml",
        "prometheusrule.yaml",
    ] {
        assert!(
            resources.iter().any(|r| r == must),
            "kustomization lacks {must}"
        );
    }
}

fn root_kustomization(docs: &[Doc]) -> &Doc {
    of_kind(docs, "Kustomization")
        .into_iter()
        .find(|k| k.file == "kustomization.yaml")
        .expect("deploy/kubernetes/kustomization.yaml")
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
    let issuers: BTreeSet<String> = of_kind(&docs, "ClusterIssuer")
        .iter()
        .map(|i| text(i, "metadata.name"))
        .collect();
    assert!(
        of_kind(&docs, "Issuer").is_empty(),
        "namespaced Issuers keep the CA key beside the workloads"
    );
    assert!(!certs.is_empty());
    for c in &certs {
        let name = text(c, "metadata.name");
        assert_eq!(text(c, "apiVersion"), CERT_MANAGER, "{name}");
        assert!(!text(c, "spec.secretName").is_empty(), "{name}: secretName");
        assert_eq!(text(c, "spec.issuerRef.kind"), "ClusterIssuer", "{name}");
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
        // Leaves get a new key at every renewal; the CA keeps its key, so
        // its renewal changes no trust (tests/e2e/ca_renewal.rs).
        let is_ca = at(c, "spec.isCA").as_bool() == Some(true);
        let policy = if is_ca { "Never" } else { "Always" };
        assert_eq!(text(c, "spec.privateKey.rotationPolicy"), policy, "{name}");
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
    let issuers = of_kind(&docs, "ClusterIssuer");
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
    // The CA's key lives outside every workload namespace.
    let ca_ns = text(ca_cert, "metadata.namespace");
    for c in role_certificates(&docs) {
        assert_ne!(text(c, "metadata.namespace"), ca_ns);
    }
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
fn pod_monitor_selects_injected_pods_on_the_admin_port() {
    let docs = manifests();
    let pm = of_kind(&docs, "PodMonitor");
    assert_eq!(pm.len(), 1);
    let pm = pm[0];
    assert_eq!(text(pm, "apiVersion"), MONITORING);
    let selector = at(pm, "spec.selector.matchLabels")
        .as_hash()
        .expect("spec.selector.matchLabels");
    // Exactly the label injection adds: every injected pod, and only those.
    let injected = YamlLoader::load_from_str(&format!("{INJECTED_LABEL}: \"true\""))
        .unwrap()
        .remove(0);
    assert_eq!(Some(selector), injected.as_hash());
    assert_eq!(endpoint_port(pm), PORT_ADMIN);
    // The NetworkPolicy opens the admin port to the same pods.
    let metrics = of_kind(&docs, "NetworkPolicy")
        .into_iter()
        .find(|p| text(p, "metadata.name") == "mtls-sidecar-metrics")
        .expect("the metrics policy");
    assert_eq!(
        at(metrics, "spec.podSelector.matchLabels").as_hash(),
        Some(selector)
    );
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

fn endpoint_port(pm: &Doc) -> String {
    let endpoints = at(pm, "spec.podMetricsEndpoints").as_vec().unwrap();
    endpoints[0]["port"]
        .as_str()
        .expect("a named port")
        .to_string()
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
            .find(|p| p["name"].as_str() == Some(PORT_ADMIN))
            .unwrap_or_else(|| panic!("{f}: an admin port"));
        assert_eq!(admin_port["containerPort"].as_i64(), Some(9901));
        for (probe, path) in [
            ("startupProbe", "/readyz"),
            ("readinessProbe", "/readyz"),
            ("livenessProbe", "/livez"),
        ] {
            let get = &c[probe]["httpGet"];
            assert_eq!(get["path"].as_str(), Some(path), "{f}: {probe}");
            assert_eq!(get["port"].as_str(), Some(PORT_ADMIN), "{f}: {probe} port");
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
        // Requests for both; a memory limit; no CPU limit (see
        // sidecar_resources_have_no_cpu_limit_and_say_where_their_figures_come_from).
        for (bound, r) in [
            ("requests", "cpu"),
            ("requests", "memory"),
            ("limits", "memory"),
        ] {
            assert!(
                c["resources"][bound][r].as_str().is_some(),
                "{f}: resources.{bound}.{r}"
            );
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
        let sources = vol["projected"]["sources"]
            .as_vec()
            .unwrap_or_else(|| panic!("{f}: /etc/mtls is one projected volume"));
        let paths = |kind: &str| -> Vec<String> {
            sources
                .iter()
                .filter(|s| !s[kind].is_badvalue())
                .flat_map(|s| s[kind]["items"].as_vec().cloned().unwrap_or_default())
                .map(|i| i["path"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            paths("secret"),
            ["tls.crt", "tls.key"],
            "{f}: identity from the Secret"
        );
        assert_eq!(
            paths("configMap"),
            ["ca.crt", "ca.crl", "deny"],
            "{f}: trust from the bundle, then the CRL and the deny-list"
        );
        // The CRL's ConfigMap may be absent (nothing revoked yet): a
        // required one would keep the pod from starting.
        let crl = sources
            .iter()
            .find(|s| s["configMap"]["name"].as_str() == Some("mtls-crl"))
            .unwrap_or_else(|| panic!("{f}: no mtls-crl source"));
        assert_eq!(crl["configMap"]["optional"].as_bool(), Some(true), "{f}");
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

/// The secret a workload's sidecar mounts (through its projected volume).
fn secret_of(w: &Doc) -> String {
    projected_source(w, "secret")
}

/// The name of the `kind` (secret, configMap) source of the projected volume.
fn projected_source(w: &Doc, kind: &str) -> String {
    let vols = at(w, "spec.template.spec.volumes").as_vec().unwrap();
    vols.iter()
        .filter_map(|v| v["projected"]["sources"].as_vec())
        .flatten()
        .find_map(|s| s[kind]["name"].as_str())
        .unwrap_or_else(|| panic!("{}: no projected {kind}", w.file))
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
    // One controller at a time: a newcomer displaces the incumbent.
    assert!(server.exclusive, "the replica's sidecar lost --exclusive");
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
    let toml_text = generated_config(
        &docs,
        controller,
        run.config.file_name().unwrap().to_str().unwrap(),
    );
    let spec: FileSpec = toml::from_str(&toml_text).expect("the generated sidecar.toml parses");
    let settings = spec.validate().expect("and validates");
    assert!(settings.routes.len() >= 2);
    for r in &settings.routes {
        assert_eq!(r.mode, mtls_sidecar::proxy::settings::Mode::Client);
        let expected: Vec<String> = r
            .peer_sans
            .patterns()
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(expected, replica_sans, "route {}", r.name);
    }
}

/// The file a workload's `config` volume holds under `key`, from the
/// kustomization's configMapGenerator (whose name kustomize hash-suffixes).
fn generated_config(docs: &[Doc], w: &Doc, key: &str) -> String {
    let vols = at(w, "spec.template.spec.volumes").as_vec().unwrap();
    let cm = vols
        .iter()
        .find_map(|v| v["configMap"]["name"].as_str())
        .expect("a configMap volume");
    assert!(
        of_kind(docs, "ConfigMap")
            .iter()
            .all(|c| text(c, "metadata.name") != cm),
        "{cm} must come from configMapGenerator (hash-suffixed), not a plain ConfigMap"
    );
    let k = root_kustomization(docs);
    let generator = at(k, "configMapGenerator")
        .as_vec()
        .expect("configMapGenerator")
        .iter()
        .find(|g| g["name"].as_str() == Some(cm))
        .unwrap_or_else(|| panic!("no configMapGenerator named {cm}"));
    let file = generator["files"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(|f| f.as_str())
        .find_map(|f| f.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("generator {cm} has no {key}=FILE"));
    std::fs::read_to_string(yaml::dir().join(file)).unwrap()
}

#[test]
fn the_ca_is_issued_behind_a_policy_and_trust_comes_from_a_bundle() {
    let docs = manifests();
    let ns = of_kind(&docs, "Namespace")[0];
    let env = text(ns, "metadata.name");
    // One CertificateRequestPolicy per role SAN, for exactly that SAN, from
    // the workload namespace only, against the ClusterIssuer they use.
    let policies = of_kind(&docs, "CertificateRequestPolicy");
    for c in role_certificates(&docs) {
        let sans = strs(c, "spec.dnsNames");
        let usages = strs(c, "spec.usages");
        let p = policies
            .iter()
            .find(|p| strs(p, "spec.allowed.dnsNames.values") == sans)
            .unwrap_or_else(|| panic!("no policy allows exactly {sans:?}"));
        assert_eq!(strs(p, "spec.allowed.usages"), usages);
        assert_eq!(
            strs(p, "spec.selector.namespace.matchNames"),
            std::slice::from_ref(&env)
        );
        assert_eq!(
            text(p, "spec.selector.issuerRef.name"),
            text(c, "spec.issuerRef.name")
        );
    }
    // The Bundle writes the ConfigMap both workloads project as ca.crt,
    // into namespaces labelled as env-1 is.
    let bundle = of_kind(&docs, "Bundle")[0];
    let name = text(bundle, "metadata.name");
    assert_eq!(text(bundle, "spec.target.configMap.key"), "ca.crt");
    let selector = at(bundle, "spec.target.namespaceSelector.matchLabels")
        .as_hash()
        .unwrap();
    let labels = at(ns, "metadata.labels").as_hash().unwrap();
    for (k, v) in selector {
        assert_eq!(
            labels.get(k),
            Some(v),
            "namespace lacks the Bundle's label {k:?}"
        );
    }
    let ca = of_kind(&docs, "Certificate")
        .into_iter()
        .find(|c| at(c, "spec.isCA").as_bool() == Some(true))
        .unwrap();
    let sources = at(bundle, "spec.sources").as_vec().unwrap();
    assert!(sources
        .iter()
        .any(|s| s["secret"]["name"].as_str() == Some(text(ca, "spec.secretName").as_str())));
    for w in workloads(&docs) {
        assert_eq!(projected_source(w, "configMap"), name, "{}", w.file);
    }
}

#[test]
fn replicas_are_spread_and_disruptions_bounded() {
    let docs = manifests();
    let sts = of_kind(&docs, "StatefulSet")[0];
    let pod_labels = at(sts, "spec.template.metadata.labels").as_hash().unwrap();
    let pdb = of_kind(&docs, "PodDisruptionBudget");
    assert_eq!(pdb.len(), 1);
    for (k, v) in at(pdb[0], "spec.selector.matchLabels").as_hash().unwrap() {
        assert_eq!(
            pod_labels.get(k),
            Some(v),
            "the PDB selects the replica pods"
        );
    }
    assert_eq!(at(pdb[0], "spec.maxUnavailable").as_i64(), Some(1));
    let spread = at(sts, "spec.template.spec.topologySpreadConstraints")
        .as_vec()
        .expect("topologySpreadConstraints");
    let keys: Vec<_> = spread
        .iter()
        .filter_map(|c| c["topologyKey"].as_str())
        .collect();
    assert!(keys.contains(&"kubernetes.io/hostname"), "{keys:?}");
    for c in spread {
        for (k, v) in c["labelSelector"]["matchLabels"].as_hash().unwrap() {
            assert_eq!(pod_labels.get(k), Some(v));
        }
    }
}

#[test]
fn network_policies_leave_dns_open_and_the_scrape_selector_to_a_patch() {
    let docs = manifests();
    let policies = of_kind(&docs, "NetworkPolicy");
    // The controller dials replicas by name: DNS over UDP and TCP.
    let egress = policies
        .iter()
        .find(|p| strs(p, "spec.policyTypes").contains(&"Egress".to_string()))
        .expect("an egress policy");
    let mut dns = BTreeSet::new();
    for rule in at(egress, "spec.egress").as_vec().unwrap() {
        for port in rule["ports"].as_vec().into_iter().flatten() {
            if port["port"].as_i64() == Some(53) {
                dns.insert(port["protocol"].as_str().unwrap().to_string());
            }
        }
    }
    assert_eq!(dns, BTreeSet::from(["TCP".to_string(), "UDP".to_string()]));
    // The admin port's `from` is what the kustomization's patch sets, and no
    // policy names a monitoring namespace literally.
    let k = root_kustomization(&docs);
    let patch = at(k, "patches")
        .as_vec()
        .unwrap()
        .iter()
        .find(|p| p["target"]["kind"].as_str() == Some("NetworkPolicy"))
        .expect("a NetworkPolicy patch");
    let target = patch["target"]["name"].as_str().unwrap();
    let metrics = policies
        .iter()
        .find(|p| text(p, "metadata.name") == target)
        .expect("the patched policy exists");
    let ports = &at(metrics, "spec.ingress").as_vec().unwrap()[0]["ports"];
    assert_eq!(ports[0]["port"].as_i64(), Some(9901));
    let path = patch["path"].as_str().unwrap();
    let ops = yaml_rust2::YamlLoader::load_from_str(
        &std::fs::read_to_string(yaml::dir().join(path)).unwrap(),
    )
    .unwrap();
    assert_eq!(ops[0][0]["path"].as_str(), Some("/spec/ingress/0/from"));
    for p in &policies {
        let src = std::fs::read_to_string(yaml::dir().join(&p.file)).unwrap();
        assert!(!src.contains("metadata.name: monitoring"), "{}", p.file);
    }
}

#[test]
fn sidecar_resources_have_no_cpu_limit_and_say_where_their_figures_come_from() {
    let docs = manifests();
    for w in workloads(&docs) {
        let c = sidecar(w);
        assert!(
            c["resources"]["limits"]["cpu"].is_badvalue(),
            "{}: CPU limit",
            w.file
        );
        let mib = |q: &Yaml| -> u64 {
            q.as_str()
                .unwrap()
                .strip_suffix("Mi")
                .unwrap()
                .parse()
                .unwrap()
        };
        let (req, lim) = (
            mib(&c["resources"]["requests"]["memory"]),
            mib(&c["resources"]["limits"]["memory"]),
        );
        // At least the measured baseline of one sidecar (~3.3 MiB; the
        // figures themselves are checked in tests/repo/deploy/sizing.rs).
        assert!(
            req * 1024 * 1024 >= 3_600_000 && lim >= req,
            "{}: {req}Mi/{lim}Mi",
            w.file
        );
        let src = std::fs::read_to_string(yaml::dir().join(&w.file)).unwrap();
        assert!(
            src.contains("benches/README.md"),
            "{}: sizing source",
            w.file
        );
    }
}
