//! deploy/kubernetes/injector: the webhook's Deployment, Service, serving
//! certificate and MutatingWebhookConfiguration line up with one another
//! and with the webhook's real command line, the selection is the
//! documented one (docs/injection.md, "Operating the webhook"), and the
//! csi-driver's requests are approved only within their namespace.

use clap::Parser;
use mtls_sidecar::cli::{Cli, Command};
use yaml_rust2::Yaml;

use super::yaml::{at, injector_manifests, manifests, of_kind, strs, text, Doc};

/// The namespaces neither webhook entry may select: the injector's own is
/// added from namespace.yaml.
const EXCLUDED: &[&str] = &[
    "kube-system",
    "cert-manager",
    "trust-manager",
    "approver-policy",
    "cert-manager-csi-driver",
];
const ANNOTATION: &str = "mtls-sidecar.dev/inject";

fn one<'a>(docs: &'a [Doc], kind: &str) -> &'a Doc {
    let all = of_kind(docs, kind);
    assert_eq!(all.len(), 1, "injector/: expected one {kind}");
    all[0]
}

fn named<'a>(docs: &'a [Doc], kind: &str, name: &str) -> &'a Doc {
    of_kind(docs, kind)
        .into_iter()
        .find(|d| d.y["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("injector/: no {kind} {name}"))
}

/// The value of `--name=value` in a container's args.
fn flag(args: &[String], name: &str) -> String {
    let prefix = format!("--{name}=");
    args.iter()
        .find_map(|a| a.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("the webhook's args lack --{name}=: {args:?}"))
        .to_string()
}

fn port_of(addr: &str) -> i64 {
    addr.rsplit(':').next().unwrap().parse().unwrap()
}

fn container_port(c: &Yaml, name: &str) -> i64 {
    c["ports"]
        .as_vec()
        .and_then(|ps| ps.iter().find(|p| p["name"].as_str() == Some(name)))
        .and_then(|p| p["containerPort"].as_i64())
        .unwrap_or_else(|| panic!("the webhook container has no port named {name}"))
}

/// What the API server accepts in `clientConfig.service.path`: every
/// segment a DNS-1123 subdomain (so no query string), as Kubernetes'
/// `ValidateWebhookService` requires.
fn api_server_accepts_path(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    rest.is_empty()
        || rest.split('/').all(|seg| {
            !seg.is_empty()
                && seg.len() <= 253
                && seg.split('.').all(|label| {
                    let b = label.as_bytes();
                    !b.is_empty()
                        && b.iter()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                        && b[0] != b'-'
                        && b[b.len() - 1] != b'-'
                })
        })
}

#[test]
fn the_path_rule_is_the_api_servers() {
    assert!(api_server_accepts_path("/inject"));
    assert!(api_server_accepts_path("/inject/namespace-enabled"));
    assert!(!api_server_accepts_path("/inject?namespace=enabled"));
    assert!(!api_server_accepts_path("inject"));
    assert!(!api_server_accepts_path("/Inject"));
    assert!(!api_server_accepts_path("/a//b"));
}

fn webhook_container(docs: &[Doc]) -> &Yaml {
    let dep = one(docs, "Deployment");
    let cs = at(dep, "spec.template.spec.containers")
        .as_vec()
        .expect("containers");
    assert_eq!(cs.len(), 1, "the webhook Deployment runs one container");
    &cs[0]
}

fn args_of(c: &Yaml) -> Vec<String> {
    c["args"]
        .as_vec()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string args").to_string())
        .collect()
}

fn namespace_values(selector: &Yaml, key: &str, operator: &str) -> Vec<String> {
    selector["matchExpressions"]
        .as_vec()
        .into_iter()
        .flatten()
        .filter(|e| e["key"].as_str() == Some(key) && e["operator"].as_str() == Some(operator))
        .flat_map(|e| e["values"].as_vec().cloned().unwrap_or_default())
        .map(|v| v.as_str().expect("string values").to_string())
        .collect()
}

#[test]
fn the_webhook_configuration_selects_opted_in_pods_only_and_fails_closed() {
    let docs = injector_manifests();
    let ns = text(one(&docs, "Namespace"), "metadata.name");
    let svc = one(&docs, "Service");
    let svc_port = at(svc, "spec.ports")[0]["port"].as_i64().expect("port");
    let mwc = one(&docs, "MutatingWebhookConfiguration");
    let hooks = at(mwc, "webhooks").as_vec().expect("webhooks");
    assert_eq!(hooks.len(), 2, "a namespace entry and an annotation entry");
    let mut paths = Vec::new();
    for h in hooks {
        let name = h["name"].as_str().expect("name");
        assert_eq!(
            h["admissionReviewVersions"],
            Yaml::Array(vec![Yaml::from_str("v1")])
        );
        assert_eq!(h["sideEffects"].as_str(), Some("None"), "{name}");
        assert_eq!(h["reinvocationPolicy"].as_str(), Some("IfNeeded"), "{name}");
        assert_eq!(h["failurePolicy"].as_str(), Some("Fail"), "{name}");
        let timeout = h["timeoutSeconds"].as_i64().expect("timeoutSeconds");
        assert!(
            (1..=10).contains(&timeout),
            "{name}: timeoutSeconds {timeout}"
        );
        // Pods, CREATE, nothing else.
        let rules = h["rules"].as_vec().expect("rules");
        assert_eq!(rules.len(), 1, "{name}");
        for (field, want) in [
            ("apiGroups", ""),
            ("operations", "CREATE"),
            ("resources", "pods"),
        ] {
            let got: Vec<_> = rules[0][field].as_vec().expect(field).iter().collect();
            assert_eq!(got, [&Yaml::String(want.into())], "{name}: rules.{field}");
        }
        let service = &h["clientConfig"]["service"];
        assert_eq!(service["name"].as_str(), svc.y["metadata"]["name"].as_str());
        assert_eq!(service["namespace"].as_str(), Some(ns.as_str()));
        assert_eq!(service["port"].as_i64(), Some(svc_port), "{name}");
        let path = service["path"].as_str().expect("path").to_string();
        assert!(
            api_server_accepts_path(&path),
            "{name}: the API server refuses path {path}"
        );
        let excluded = namespace_values(
            &h["namespaceSelector"],
            "kubernetes.io/metadata.name",
            "NotIn",
        );
        for must in EXCLUDED.iter().copied().chain([ns.as_str()]) {
            assert!(
                excluded.iter().any(|e| e == must),
                "{name} does not exclude {must}"
            );
        }
        let conditions: Vec<String> = h["matchConditions"]
            .as_vec()
            .into_iter()
            .flatten()
            .map(|c| c["expression"].as_str().expect("expression").to_string())
            .collect();
        let in_enabled = namespace_values(&h["namespaceSelector"], ANNOTATION, "In");
        let not_in_enabled = namespace_values(&h["namespaceSelector"], ANNOTATION, "NotIn");
        if in_enabled == ["enabled"] {
            // The namespace entry: the path tells the webhook the
            // namespace opted in; the pod's own "disabled" stays out.
            assert_eq!(path, "/inject/namespace-enabled", "{name}");
            assert!(
                conditions
                    .iter()
                    .any(|c| c.contains(ANNOTATION) && c.contains("'disabled'")),
                "{name}: a pod annotated disabled must not depend on the webhook"
            );
        } else {
            // The annotation entry: other namespaces, annotated pods only,
            // every value but "disabled" (a misspelt opt-in is refused by
            // the webhook, not admitted uninjected; admission.py judges
            // the selection with sample pods).
            assert_eq!(not_in_enabled, ["enabled"], "{name}");
            assert_eq!(path, "/inject", "{name}");
            assert!(
                conditions.iter().any(|c| c.contains(&format!("['{ANNOTATION}'] != 'disabled'"))
                    && c.contains(&format!("'{ANNOTATION}' in object.metadata.annotations"))
                    && c.contains("has(object.metadata.annotations)")),
                "{name}: selects annotated pods only, and must not fail on a pod without annotations: {conditions:?}"
            );
        }
        paths.push(path);
    }
    paths.sort();
    assert_eq!(paths, ["/inject", "/inject/namespace-enabled"]);
    // The caBundle comes from the injector's CA certificate.
    let from = mwc.y["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        .as_str()
        .expect("cert-manager.io/inject-ca-from");
    let (cns, cname) = from.split_once('/').expect("namespace/name");
    assert_eq!(cns, ns);
    let ca = named(&docs, "Certificate", cname);
    assert_eq!(at(ca, "spec.isCA").as_bool(), Some(true), "{from} is no CA");
}

#[test]
fn the_serving_certificate_names_the_service_and_is_mounted_whole() {
    let docs = injector_manifests();
    let ns = text(one(&docs, "Namespace"), "metadata.name");
    let svc = one(&docs, "Service");
    let want = format!("{}.{ns}.svc", text(svc, "metadata.name"));
    let serving: Vec<_> = of_kind(&docs, "Certificate")
        .into_iter()
        .filter(|c| at(c, "spec.isCA").as_bool() != Some(true))
        .collect();
    assert_eq!(serving.len(), 1, "one serving certificate");
    let cert = serving[0];
    assert_eq!(strs(cert, "spec.dnsNames"), [want]);
    assert!(strs(cert, "spec.usages").contains(&"server auth".to_string()));
    // Issued by the CA whose certificate is the caBundle.
    let issuer = named(&docs, "Issuer", &text(cert, "spec.issuerRef.name"));
    let ca_secret = text(issuer, "spec.ca.secretName");
    let mwc = one(&docs, "MutatingWebhookConfiguration");
    let from = mwc.y["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        .as_str()
        .unwrap();
    let ca = named(&docs, "Certificate", from.split_once('/').unwrap().1);
    assert_eq!(text(ca, "spec.secretName"), ca_secret);
    // Its Secret is the --tls-dir, mounted whole.
    let c = webhook_container(&docs);
    let tls_dir = flag(&args_of(c), "tls-dir");
    let mounts = c["volumeMounts"].as_vec().expect("volumeMounts");
    let mount = mounts
        .iter()
        .find(|m| m["mountPath"].as_str() == Some(tls_dir.as_str()))
        .expect("a volume mounted at --tls-dir");
    assert!(
        mount["subPath"].is_badvalue(),
        "a subPath never sees a renewal"
    );
    let dep = one(&docs, "Deployment");
    let volume = at(dep, "spec.template.spec.volumes")
        .as_vec()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mounted volume");
    assert_eq!(
        volume["secret"]["secretName"].as_str(),
        Some(text(cert, "spec.secretName").as_str())
    );
    // The Service reaches the port the webhook listens on.
    let target = at(svc, "spec.ports")[0]["targetPort"]
        .as_str()
        .expect("a named targetPort");
    assert_eq!(
        container_port(c, target),
        port_of(&flag(&args_of(c), "listen"))
    );
}

#[test]
fn the_webhook_deployment_stays_available_hardened_and_probed() {
    let docs = injector_manifests();
    let ns = text(one(&docs, "Namespace"), "metadata.name");
    for level in ["enforce", "warn", "audit"] {
        let key = format!("pod-security.kubernetes.io/{level}");
        assert_eq!(
            one(&docs, "Namespace").y["metadata"]["labels"][key.as_str()].as_str(),
            Some("restricted")
        );
    }
    let dep = one(&docs, "Deployment");
    assert_eq!(text(dep, "metadata.namespace"), ns);
    assert!(at(dep, "spec.replicas").as_i64().unwrap() >= 2);
    let labels = &at(dep, "spec.template.metadata.labels");
    let pdb = one(&docs, "PodDisruptionBudget");
    for (k, v) in at(pdb, "spec.selector.matchLabels")
        .as_hash()
        .expect("PDB selector")
    {
        assert_eq!(
            &labels[k.as_str().unwrap()],
            v,
            "the PDB selects the webhook's pods"
        );
    }
    assert_eq!(at(pdb, "spec.minAvailable").as_i64(), Some(1));
    let spread = at(dep, "spec.template.spec.topologySpreadConstraints")
        .as_vec()
        .expect("topologySpreadConstraints");
    assert!(spread
        .iter()
        .any(|t| t["topologyKey"].as_str() == Some("kubernetes.io/hostname")));
    let c = webhook_container(&docs);
    let args = args_of(c);
    // The real command line parses as the webhook's.
    let cli = Cli::try_parse_from(std::iter::once("mtls-sidecar".to_string()).chain(args.clone()))
        .unwrap_or_else(|e| panic!("the webhook's args do not parse: {e}"));
    assert!(matches!(cli.command, Command::Webhook(_)));
    // The image injected is the image running, pinned the same way.
    assert_eq!(Some(flag(&args, "image").as_str()), c["image"].as_str());
    let admin = port_of(&flag(&args, "admin"));
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/livez")] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"].as_str(), Some(path), "{probe}");
        let port = get["port"].as_str().expect("a named probe port");
        assert_eq!(
            container_port(c, port),
            admin,
            "{probe} is on the admin port"
        );
    }
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["capabilities"]["drop"][0].as_str(), Some("ALL"));
    assert!(
        c["resources"]["limits"]["cpu"].is_badvalue(),
        "no CPU limit"
    );
}

#[test]
fn csi_driver_requests_are_approved_only_within_their_namespace() {
    let docs = injector_manifests();
    let policy = named(&docs, "CertificateRequestPolicy", "mtls-sidecar-csi");
    // Selected by the issuer the workloads' csi volumes name: pki's.
    let pki = manifests();
    let issuer = text(policy, "spec.selector.issuerRef.name");
    assert_eq!(
        text(policy, "spec.selector.issuerRef.kind"),
        "ClusterIssuer"
    );
    assert!(of_kind(&pki, "ClusterIssuer")
        .iter()
        .any(|i| i.y["metadata"]["name"].as_str() == Some(issuer.as_str())));
    assert!(at(policy, "spec.allowed.isCA").is_badvalue(), "never a CA");
    for field in ["dnsNames", "uris"] {
        let rules = at(policy, &format!("spec.allowed.{field}.validations"))
            .as_vec()
            .unwrap_or_else(|| panic!("{field}: no CEL validations"));
        assert!(
            rules.iter().any(|r| r["rule"]
                .as_str()
                .is_some_and(|r| r.contains("cr.namespace"))),
            "{field}: names are not confined to the request's namespace"
        );
    }
    let usages = strs(policy, "spec.allowed.usages");
    for u in &usages {
        assert!(
            ["digital signature", "server auth", "client auth"].contains(&u.as_str()),
            "usage {u}"
        );
    }
    assert!(!text(policy, "spec.constraints.maxDuration").is_empty());
    // Usable by the csi-driver's own ServiceAccount, the requester.
    let binding = of_kind(&docs, "ClusterRoleBinding")
        .into_iter()
        .find(|b| {
            at(b, "subjects").as_vec().into_iter().flatten().any(|s| {
                s["kind"].as_str() == Some("ServiceAccount")
                    && s["name"].as_str() == Some("cert-manager-csi-driver")
            })
        })
        .expect("a ClusterRoleBinding for the csi-driver's ServiceAccount");
    let role = named(&docs, "ClusterRole", &text(binding, "roleRef.name"));
    let rule = &at(role, "rules")[0];
    assert_eq!(rule["verbs"][0].as_str(), Some("use"));
    assert_eq!(rule["resourceNames"][0].as_str(), Some("mtls-sidecar-csi"));
}
