// Validates deploy/ offline (docs/deploy-operations.md):
//   Kubernetes  `kubectl kustomize` builds deploy/k8s; every object is checked against the
//               schema of its kind generated from Kubernetes' OpenAPI (kubernetes-models:
//               required fields, types, formats) and refused when it holds a field the schema
//               does not know; then the cross-references: selectors against pod labels,
//               Service and probe ports against container ports, probe paths against the
//               server's health endpoints, volumes against mounts and claims, the generated
//               ConfigMap against the files HAProxy loads, the drain timeout against the grace
//               period, the memory against the measured peak.
//   HAProxy     `haproxy -c` on the ConfigMap's haproxy.cfg (with the Lua file where the mount
//               puts it), and the balancing, health check, retry and timeout lines compared
//               with deploy/haproxy/haproxy.cfg.
//   Prometheus  promtool check config, check rules, test rules.
//   systemd     systemd-analyze verify on the unit, systemd-sysusers on the user, the env file.
// Each group also runs on a deliberately broken copy that must be refused, so no check passes
// for want of looking. Exit 0 when all pass, 1 when one fails, 77 (skip) when a tool or the npm
// packages (tests/deploy/setup.sh) are missing.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const require = createRequire(import.meta.url);

function skip(why) {
  console.log(`SKIP: ${why}`);
  process.exit(77);
}
// A tool's path: on PATH, else in /usr/sbin or /sbin (haproxy is /usr/sbin/haproxy, off the
// PATH of users other than root).
function which(tool) {
  const r = spawnSync("sh", ["-c", `command -v ${tool}`], { encoding: "utf8" });
  if (r.status === 0) return r.stdout.trim();
  return ["/usr/sbin", "/sbin"].map((d) => path.join(d, tool)).find((f) => fs.existsSync(f));
}
const tools = {};
for (const tool of ["haproxy", "promtool", "systemd-analyze", "systemd-sysusers"]) {
  tools[tool] = which(tool);
  if (!tools[tool]) skip(`${tool} is not installed (Debian packages haproxy, prometheus, systemd)`);
}
// kubectl is not in Debian 12 at a version that builds deploy/k8s (kubernetes-client is 1.20,
// without --load-restrictor): without it the objects are built by kustomizeSubset below, and
// with it both builds must agree.
tools.kubectl = which("kubectl");
for (const pkg of ["kubernetes-models", "yaml"]) {
  try {
    require.resolve(`${pkg}/package.json`);
  } catch {
    skip(`npm package ${pkg} missing: run tests/deploy/setup.sh`);
  }
}
const YAML = await import("yaml");
const models = {
  "v1/Namespace": (await import("kubernetes-models/v1/Namespace")).Namespace,
  "v1/PersistentVolumeClaim": (await import("kubernetes-models/v1/PersistentVolumeClaim"))
    .PersistentVolumeClaim,
  "v1/Service": (await import("kubernetes-models/v1/Service")).Service,
  "v1/ConfigMap": (await import("kubernetes-models/v1/ConfigMap")).ConfigMap,
  "apps/v1/Deployment": (await import("kubernetes-models/apps/v1/Deployment")).Deployment,
  "policy/v1/PodDisruptionBudget": (await import("kubernetes-models/policy/v1/PodDisruptionBudget"))
    .PodDisruptionBudget,
};

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "vls-deploy-"));
process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));
const run = (cmd, args, opts = {}) => spawnSync(tools[cmd] ?? cmd, args, { encoding: "utf8", ...opts });
const clone = (x) => structuredClone(x);

let passed = 0;
let failed = 0;
function report(name, errors) {
  if (errors.length === 0) {
    passed++;
    console.log(`PASS ${name}`);
  } else {
    failed++;
    console.log(`FAIL ${name}`);
    for (const e of errors) console.log(`  - ${e}`);
  }
}
// A broken copy must be refused, by the check named, for the reason expected.
function expectRefused(name, errors, pattern) {
  const hit = errors.some((e) => pattern.test(e));
  report(`negative: ${name}`, hit ? [] : [`not refused as expected (${pattern}); got: ${errors.join("; ") || "no error"}`]);
}

// ---------------------------------------------------------------- Kubernetes: schema
// The schema validators of kubernetes-models check required fields, types and formats but let
// unknown fields through (the API server refuses them under kubectl's strict field validation).
// Every property a validator reads is a property its schema declares (map schemas read every
// key), so the object is validated through a proxy that records the keys read, and any key of
// the object left unread is an unknown field.
function schemaErrors(obj) {
  const where = `${obj?.kind}/${obj?.metadata?.name}`;
  const Model = models[`${obj?.apiVersion}/${obj?.kind}`];
  if (!Model) return [`${where}: no schema for ${obj?.apiVersion} ${obj?.kind}`];
  const read = new WeakMap();
  const wrap = (v) => {
    if (v === null || typeof v !== "object") return v;
    const seen = new Set();
    read.set(v, seen);
    return new Proxy(v, {
      get(target, key, receiver) {
        if (typeof key === "string") seen.add(key);
        return wrap(Reflect.get(target, key, receiver));
      },
    });
  };
  try {
    Model.prototype.validate.call(wrap(obj));
  } catch (e) {
    return [`${where}: ${e.message}`];
  }
  const unknown = [];
  const walk = (v, at) => {
    if (v === null || typeof v !== "object") return;
    if (Array.isArray(v)) return v.forEach((x, i) => walk(x, `${at}[${i}]`));
    const seen = read.get(v);
    for (const k of Object.keys(v)) {
      if (!seen?.has(k)) unknown.push(`${where}: unknown field ${at}.${k}`);
      walk(v[k], `${at}.${k}`);
    }
  };
  walk(obj, "");
  return unknown;
}

// ---------------------------------------------------------------- Kubernetes: cross-references
const find = (objs, kind, name) => objs.find((o) => o.kind === kind && o.metadata?.name === name);
const matches = (selector, labels) =>
  Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v) &&
  Object.keys(selector ?? {}).length > 0;
function flagValue(args, flag) {
  const i = args.indexOf(flag);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : undefined;
}
// A probe's or Service's port (number or name) as the container's port number, or undefined.
function containerPort(container, port) {
  const p = (container.ports ?? []).find((x) => x.containerPort === port || x.name === port);
  return p?.containerPort;
}
function memoryBytes(q) {
  const m = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(String(q));
  if (!m) return NaN;
  const unit = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, k: 1e3, M: 1e6, G: 1e9, T: 1e12 };
  return Number(m[1]) * (m[2] ? unit[m[2]] : 1);
}
// The peak resident memory measured while `vlstack serve` loaded Qwen3-VL-2B-Instruct (BF16,
// 4 slots x 4,096 tokens): VmHWM 6,706,512 KiB (docs/deploy-operations.md, "Resources").
const MEASURED_PEAK_BYTES = 6706512 * 1024;

function crossErrors(objs) {
  const errs = [];
  const ns = "vlstack";
  for (const o of objs) {
    if (o.kind !== "Namespace" && o.metadata?.namespace !== ns) {
      errs.push(`${o.kind}/${o.metadata?.name}: namespace ${o.metadata?.namespace}, not ${ns}`);
    }
  }
  const deployments = objs.filter((o) => o.kind === "Deployment");
  for (const d of deployments) {
    const labels = d.spec?.template?.metadata?.labels;
    if (!matches(d.spec?.selector?.matchLabels, labels)) {
      errs.push(`Deployment/${d.metadata.name}: selector does not match its pod labels`);
    }
    const pod = d.spec?.template?.spec ?? {};
    const volumes = new Map((pod.volumes ?? []).map((v) => [v.name, v]));
    for (const c of pod.containers ?? []) {
      for (const kind of ["startupProbe", "livenessProbe", "readinessProbe"]) {
        const h = c[kind]?.httpGet;
        if (h && containerPort(c, h.port) === undefined) {
          errs.push(`Deployment/${d.metadata.name}: ${kind} port ${h.port} is no container port`);
        }
      }
      for (const m of c.volumeMounts ?? []) {
        if (!volumes.has(m.name)) errs.push(`Deployment/${d.metadata.name}: mount ${m.name} has no volume`);
      }
    }
    for (const v of volumes.values()) {
      if (v.persistentVolumeClaim && !find(objs, "PersistentVolumeClaim", v.persistentVolumeClaim.claimName)) {
        errs.push(`Deployment/${d.metadata.name}: claim ${v.persistentVolumeClaim.claimName} is not defined`);
      }
      if (v.configMap && !find(objs, "ConfigMap", v.configMap.name)) {
        errs.push(`Deployment/${d.metadata.name}: ConfigMap ${v.configMap.name} is not defined`);
      }
    }
  }
  const podsOf = (selector) =>
    deployments.filter((d) => matches(selector, d.spec?.template?.metadata?.labels));
  for (const s of objs.filter((o) => o.kind === "Service")) {
    const targets = podsOf(s.spec?.selector);
    if (targets.length !== 1) {
      errs.push(`Service/${s.metadata.name}: selector matches ${targets.length} Deployments, not 1`);
      continue;
    }
    const c = targets[0].spec.template.spec.containers[0];
    for (const p of s.spec.ports ?? []) {
      if (containerPort(c, p.targetPort ?? p.port) === undefined) {
        errs.push(`Service/${s.metadata.name}: targetPort ${p.targetPort} is no port of ${targets[0].metadata.name}`);
      }
    }
  }
  for (const p of objs.filter((o) => o.kind === "PodDisruptionBudget")) {
    if (podsOf(p.spec?.selector?.matchLabels).length !== 1) {
      errs.push(`PodDisruptionBudget/${p.metadata.name}: selector matches no single Deployment`);
    }
  }

  // The replicas.
  const vls = find(objs, "Deployment", "vlstack");
  if (!vls) return [...errs, "Deployment/vlstack missing"];
  const pod = vls.spec.template.spec;
  const c = pod.containers.find((x) => x.name === "vlstack");
  if (!c) return [...errs, "Deployment/vlstack: no container vlstack"];
  const args = c.args ?? [];
  if ((c.command ?? [])[0] !== "/usr/bin/vlstack" || args[0] !== "serve") {
    errs.push("vlstack: the container must run /usr/bin/vlstack serve (the Debian package's path)");
  }
  const port = Number(flagValue(args, "--port"));
  if (flagValue(args, "--host") !== "0.0.0.0") errs.push("vlstack: --host must be 0.0.0.0");
  if (containerPort(c, "http") !== port) errs.push(`vlstack: container port http is not --port ${port}`);
  if (flagValue(args, "--overload-status") !== "503") errs.push("vlstack: --overload-status must be 503");
  const drain = Number(flagValue(args, "--drain-timeout") ?? 30);
  if (!(pod.terminationGracePeriodSeconds > drain)) {
    errs.push(`vlstack: terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} is not above --drain-timeout ${drain}`);
  }
  const probes = {
    readinessProbe: "/health/ready",
    livenessProbe: "/health/live",
    startupProbe: "/health/live",
  };
  for (const [kind, want] of Object.entries(probes)) {
    const h = c[kind]?.httpGet;
    if (!h) errs.push(`vlstack: no httpGet ${kind}`);
    else if (h.path !== want || containerPort(c, h.port) !== port) {
      errs.push(`vlstack: ${kind} is ${h.path} on ${h.port}, not ${want} on --port ${port}`);
    }
  }
  const model = flagValue(args, "--model") ?? "";
  const mount = (c.volumeMounts ?? []).find((m) => model.startsWith(m.mountPath.replace(/\/?$/, "/")));
  if (!mount) errs.push(`vlstack: --model ${model} is under no volume mount`);
  else if (!mount.readOnly) errs.push(`vlstack: the model mount ${mount.mountPath} is not read-only`);
  const ru = vls.spec.strategy?.rollingUpdate;
  if (vls.spec.strategy?.type !== "RollingUpdate" || ru?.maxUnavailable !== 0 || ru?.maxSurge !== 1) {
    errs.push("vlstack: the rollout must be RollingUpdate with maxUnavailable 0, maxSurge 1");
  }
  const res = c.resources ?? {};
  const reqMem = memoryBytes(res.requests?.memory);
  const limMem = memoryBytes(res.limits?.memory);
  if (!(reqMem >= MEASURED_PEAK_BYTES) || !(limMem >= reqMem)) {
    errs.push(`vlstack: memory request ${res.requests?.memory} / limit ${res.limits?.memory} below the measured peak of ${(MEASURED_PEAK_BYTES / 2 ** 30).toFixed(2)} GiB`);
  }
  if (String(res.limits?.cpu) !== flagValue(args, "--threads")) {
    errs.push(`vlstack: --threads ${flagValue(args, "--threads")} is not the CPU limit ${res.limits?.cpu}`);
  }
  const headless = find(objs, "Service", "vlstack-replicas");
  if (headless?.spec?.clusterIP !== "None") errs.push("Service/vlstack-replicas must be headless");

  // The balancer and its ConfigMap.
  const bal = find(objs, "Deployment", "vlstack-balancer");
  if (!bal) return [...errs, "Deployment/vlstack-balancer missing"];
  const hc = bal.spec.template.spec.containers[0];
  const cfgVolume = (bal.spec.template.spec.volumes ?? []).find((v) => v.configMap);
  const cm = cfgVolume && find(objs, "ConfigMap", cfgVolume.configMap.name);
  if (!cm) return [...errs, "vlstack-balancer: no generated ConfigMap mounted"];
  if (!/^vlstack-haproxy-[a-z0-9]{10}$/.test(cm.metadata.name)) {
    errs.push(`ConfigMap ${cm.metadata.name}: not the hashed name of the kustomize generator`);
  }
  const cfgMount = (hc.volumeMounts ?? []).find((m) => m.name === cfgVolume.name);
  if (!cfgMount) return [...errs, "vlstack-balancer: the ConfigMap volume is not mounted"];
  // The files the container sees: mountPath/item.path -> ConfigMap key (all keys when no items).
  const files = new Map();
  for (const item of cfgVolume.configMap.items ?? Object.keys(cm.data ?? {}).map((k) => ({ key: k, path: k }))) {
    if (!(item.key in (cm.data ?? {}))) errs.push(`ConfigMap ${cm.metadata.name} has no key ${item.key}`);
    files.set(path.posix.join(cfgMount.mountPath, item.path), item.key);
  }
  const command = hc.command ?? [];
  const cfgPath = flagValue(command, "-f");
  const cfgKey = files.get(cfgPath);
  if (!cfgKey) return [...errs, `vlstack-balancer: -f ${cfgPath} is not a file of the ConfigMap mount`];
  const cfg = cm.data[cfgKey];
  for (const m of cfg.matchAll(/^\s*lua-load\s+(\S+)/gm)) {
    if (!files.has(m[1])) errs.push(`haproxy.cfg: lua-load ${m[1]} is not a file of the ConfigMap mount`);
  }
  const binds = [...cfg.matchAll(/^\s*bind\s+\S*:(\d+)/gm)].map((m) => Number(m[1]));
  for (const p of binds) {
    if (!(hc.ports ?? []).some((x) => x.containerPort === p)) errs.push(`haproxy.cfg: bind :${p} is no container port`);
  }
  const svcPort = headless?.spec?.ports?.[0];
  const fqdn = `${headless?.metadata?.name}.${ns}.svc.cluster.local:${svcPort?.port}`;
  const tmpl = /^\s*server-template\s+\S+\s+\S+\s+(\S+)(.*)$/m.exec(cfg);
  if (!tmpl) errs.push("haproxy.cfg: no server-template");
  else {
    if (tmpl[1] !== fqdn) errs.push(`haproxy.cfg: server-template resolves ${tmpl[1]}, not the headless Service ${fqdn}`);
    if (svcPort && containerPort(c, svcPort.targetPort) !== port) errs.push("vlstack-replicas: port is not the replicas' --port");
    const resolvers = /\bresolvers\s+(\S+)/.exec(tmpl[2])?.[1];
    if (!resolvers || !new RegExp(`^resolvers\\s+${resolvers}\\s*$`, "m").test(cfg)) {
      errs.push("haproxy.cfg: server-template names no defined resolvers section");
    }
    if (!/\binit-addr\s+none\b/.test(tmpl[2])) errs.push("haproxy.cfg: server-template without init-addr none");
  }
  if (!/^\s*parse-resolv-conf\s*$/m.test(cfg)) errs.push("haproxy.cfg: the resolvers do not parse-resolv-conf");
  const check = /^\s*option\s+httpchk\s+GET\s+(\S+)/m.exec(cfg)?.[1];
  if (check !== probes.readinessProbe) errs.push(`haproxy.cfg: health check ${check}, not ${probes.readinessProbe}`);
  const monitor = /^\s*monitor-uri\s+(\S+)/m.exec(cfg)?.[1];
  for (const kind of ["readinessProbe", "livenessProbe"]) {
    const h = hc[kind]?.httpGet;
    if (!h || h.path !== monitor || !binds.includes(containerPort(hc, h.port))) {
      errs.push(`vlstack-balancer: ${kind} is not the monitor-uri ${monitor} on a bound port`);
    }
  }
  const lua = fs.readFileSync(path.join(root, "deploy/haproxy/conversation_key.lua"), "utf8");
  if (cm.data["conversation_key.lua"] !== lua) {
    errs.push("ConfigMap: conversation_key.lua differs from deploy/haproxy/conversation_key.lua");
  }
  return errs;
}

// ---------------------------------------------------------------- HAProxy
// haproxy -c on the ConfigMap's files laid out in a folder that stands for the mount.
function haproxyCheck(cm, mountPath, name) {
  const dir = fs.mkdtempSync(path.join(tmp, "haproxy-"));
  for (const [k, v] of Object.entries(cm.data)) fs.writeFileSync(path.join(dir, k), v);
  const cfg = path.join(dir, "haproxy.cfg");
  fs.writeFileSync(cfg, cm.data["haproxy.cfg"].split(`${mountPath}/`).join(`${dir}/`));
  const r = run("haproxy", ["-c", "-f", cfg]);
  const out = `${r.stdout}${r.stderr}`.trim();
  return r.status === 0 && /Configuration file is valid/.test(out)
    ? []
    : [`haproxy -c (${name}) exited ${r.status}: ${out.split("\n").slice(-4).join(" | ")}`];
}

// The sections of an HAProxy config as { "backend replicas": [directive lines] }, comments and
// blank lines dropped, whitespace collapsed.
function sections(text) {
  const out = {};
  let cur = null;
  for (const raw of text.split("\n")) {
    const line = raw.replace(/\s+#.*$/, "").replace(/^\s*#.*$/, "").trim().replace(/\s+/g, " ");
    if (!line) continue;
    if (/^\S/.test(raw)) {
      cur = line;
      out[cur] = [];
    } else if (cur) out[cur].push(line);
  }
  return out;
}
// What the Kubernetes flavour may change: addresses, server lines, file paths, the admin socket.
const PLACE_SPECIFIC = /^(bind|server|server-template|lua-load|stats socket|monitor-uri) /;
function driftErrors(k8sText, loopbackText) {
  const a = sections(k8sText);
  const b = sections(loopbackText);
  const errs = [];
  for (const s of ["global", "defaults", "frontend vlstack", "backend replicas", "frontend stats"]) {
    const x = (a[s] ?? []).filter((l) => !PLACE_SPECIFIC.test(l));
    const y = (b[s] ?? []).filter((l) => !PLACE_SPECIFIC.test(l));
    if (!a[s] || !b[s]) errs.push(`section "${s}" missing in ${a[s] ? "deploy/haproxy" : "deploy/k8s"}/haproxy.cfg`);
    for (const l of x.filter((l) => !y.includes(l))) errs.push(`${s}: only deploy/k8s has "${l}"`);
    for (const l of y.filter((l) => !x.includes(l))) errs.push(`${s}: only deploy/haproxy has "${l}"`);
  }
  return errs;
}

// ---------------------------------------------------------------- Prometheus
function promtool(args, cwd = root) {
  const r = run("promtool", args, { cwd });
  return r.status === 0 ? [] : [`promtool ${args.join(" ")} exited ${r.status}: ${`${r.stdout}${r.stderr}`.trim().split("\n").slice(-6).join(" | ")}`];
}

// ---------------------------------------------------------------- systemd
// systemd-analyze verify exits 0 on unknown keys and bad values (it only warns), so any output
// is a failure. The binary is not installed here: the copy verified runs /bin/true instead.
function unitErrors(unitText, name) {
  const dir = fs.mkdtempSync(path.join(tmp, "unit-"));
  const file = path.join(dir, name);
  fs.writeFileSync(file, unitText.replace(/^ExecStart=\/usr\/bin\/vlstack /m, "ExecStart=/bin/true "));
  const r = run("systemd-analyze", ["verify", "--man=no", file]);
  const out = `${r.stdout}${r.stderr}`.trim();
  return r.status === 0 && out === "" ? [] : [`systemd-analyze verify ${name} exited ${r.status}: ${out}`];
}
function envFile(text) {
  const env = {};
  for (const line of text.split("\n")) {
    const m = /^([A-Z_][A-Z0-9_]*)=(.*)$/.exec(line.trim());
    if (m) env[m[1]] = m[2];
  }
  return env;
}
function systemdErrors(unitText, envText) {
  const errs = [];
  const exec = /^ExecStart=(.*)$/m.exec(unitText)?.[1] ?? "";
  if (!exec.startsWith("/usr/bin/vlstack serve ")) errs.push("ExecStart is not /usr/bin/vlstack serve (the Debian package's path)");
  const defaults = {};
  for (const m of unitText.matchAll(/^Environment=([A-Z_][A-Z0-9_]*)=(.*)$/gm)) defaults[m[1]] = m[2];
  const env = { ...defaults, ...envFile(envText) };
  for (const m of exec.matchAll(/\$\{?([A-Z_][A-Z0-9_]*)\}?/g)) {
    if (!(m[1] in env)) errs.push(`ExecStart uses $${m[1]}, set neither by the unit nor by the example env file`);
  }
  const stop = Number(/^TimeoutStopSec=(\d+)s?$/m.exec(unitText)?.[1]);
  const drain = Number(env.VLSTACK_DRAIN_TIMEOUT);
  if (!(stop > drain)) errs.push(`TimeoutStopSec ${stop} is not above the drain timeout ${drain}`);
  if (!/^KillSignal=SIGTERM$/m.test(unitText)) errs.push("KillSignal is not SIGTERM");
  if (!/^EnvironmentFile=\/etc\/vlstack\/%i\.env$/m.test(unitText)) errs.push("EnvironmentFile is not /etc/vlstack/%i.env");
  if (!(env.VLSTACK_ARGS ?? "").includes("--overload-status 503")) errs.push("the example env file does not set --overload-status 503");
  return errs;
}

// ---------------------------------------------------------------- the build without kubectl
// What `kubectl kustomize` does with the fields deploy/k8s/kustomization.yaml uses, and
// nothing more (any other field is refused): the resources with the namespace set, the
// generated ConfigMap named with a hash of its content and referred to by that name, images.
function kustomizeSubset(dir) {
  const k = YAML.parse(fs.readFileSync(path.join(dir, "kustomization.yaml"), "utf8"));
  const known = ["apiVersion", "kind", "namespace", "resources", "configMapGenerator", "images"];
  const extra = Object.keys(k).filter((key) => !known.includes(key));
  if (extra.length) throw new Error(`kustomization.yaml uses ${extra.join(", ")}: install kubectl to build it`);
  const objs = [];
  for (const file of k.resources ?? []) {
    for (const d of YAML.parseAllDocuments(fs.readFileSync(path.join(dir, file), "utf8"))) {
      if (d.errors.length) throw new Error(`${file}: ${d.errors[0].message}`);
      const o = d.toJS();
      if (o) objs.push(o);
    }
  }
  const renamed = {};
  for (const g of k.configMapGenerator ?? []) {
    const extraG = Object.keys(g).filter((key) => !["name", "files"].includes(key));
    if (extraG.length) throw new Error(`configMapGenerator uses ${extraG.join(", ")}: install kubectl`);
    const data = {};
    for (const f of g.files) {
      const [key, file] = f.includes("=") ? f.split("=") : [path.basename(f), f];
      data[key] = fs.readFileSync(path.join(dir, file), "utf8");
    }
    const digest = createHash("sha256").update(JSON.stringify(data)).digest();
    const suffix = [...digest.subarray(0, 10)].map((b) => "bcdfghkmt2456789"[b % 16]).join("");
    renamed[g.name] = `${g.name}-${suffix}`;
    objs.push({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: renamed[g.name] }, data });
  }
  for (const o of objs) {
    if (o.kind === "Namespace") {
      if (o.metadata.name !== k.namespace) throw new Error(`Namespace ${o.metadata.name} is not ${k.namespace}`);
    } else if (k.namespace) {
      o.metadata.namespace = k.namespace;
    }
    for (const v of o.spec?.template?.spec?.volumes ?? []) {
      if (v.configMap && renamed[v.configMap.name]) v.configMap.name = renamed[v.configMap.name];
    }
    for (const c of o.spec?.template?.spec?.containers ?? []) {
      for (const img of k.images ?? []) {
        const extraI = Object.keys(img).filter((key) => !["name", "newName", "newTag"].includes(key));
        if (extraI.length) throw new Error(`images use ${extraI.join(", ")}: install kubectl`);
        if (c.image.replace(/[:@].*$/, "") === img.name) {
          c.image = `${img.newName ?? img.name}:${img.newTag ?? c.image.split(":")[1] ?? "latest"}`;
        }
      }
    }
  }
  return objs;
}
// Objects in a comparable form: sorted by kind and name, the generated names' hash masked.
const canonical = (objs) =>
  JSON.stringify(
    [...objs].sort((a, b) => `${a.kind}/${a.metadata.name}`.localeCompare(`${b.kind}/${b.metadata.name}`)),
    (key, value) =>
      value && typeof value === "object" && !Array.isArray(value)
        ? Object.fromEntries(Object.entries(value).sort(([x], [y]) => x.localeCompare(y)))
        : value,
  ).replace(/(vlstack-haproxy)-[a-z0-9]{10}\b/g, "$1-HASH");

// ================================================================ the checks
const k8sDir = path.join(root, "deploy/k8s");
let objs;
try {
  objs = kustomizeSubset(k8sDir);
  report("deploy/k8s built from its kustomization.yaml", []);
} catch (e) {
  report("deploy/k8s built from its kustomization.yaml", [e.message]);
}
if (tools.kubectl) {
  const built = run("kubectl", ["kustomize", "--load-restrictor", "LoadRestrictionsNone", k8sDir]);
  const docs = built.status === 0 ? YAML.parseAllDocuments(built.stdout) : [];
  const errs = built.status === 0 ? docs.flatMap((d) => d.errors.map((e) => e.message)) : [built.stderr.trim()];
  report("kubectl kustomize --load-restrictor LoadRestrictionsNone deploy/k8s", errs);
  if (errs.length === 0) {
    const fromKubectl = docs.map((d) => d.toJS());
    if (objs && canonical(objs) !== canonical(fromKubectl)) {
      report("kubectl's build and the test's agree", ["they differ: the test's build (kustomizeSubset) needs updating"]);
    } else if (objs) {
      report("kubectl's build and the test's agree", []);
    }
    objs = fromKubectl;  // what kubectl builds is what gets applied
  }
} else {
  console.log("NOTE kubectl not installed: checking the test's own build of deploy/k8s");
}
if (!objs) {
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(1);
}
const kinds = objs.map((o) => `${o.kind}/${o.metadata?.name}`).sort();
const want = [
  "ConfigMap/vlstack-haproxy-*",
  "Deployment/vlstack",
  "Deployment/vlstack-balancer",
  "Namespace/vlstack",
  "PersistentVolumeClaim/vlstack-models",
  "PodDisruptionBudget/vlstack",
  "PodDisruptionBudget/vlstack-balancer",
  "Service/vlstack",
  "Service/vlstack-replicas",
];
const got = kinds.map((k) => k.replace(/^ConfigMap\/vlstack-haproxy-.*$/, "ConfigMap/vlstack-haproxy-*"));
report(`the ${want.length} objects`, JSON.stringify(got) === JSON.stringify(want) ? [] : [`got ${kinds.join(", ")}`]);
for (const o of objs) report(`schema ${o.kind}/${o.metadata?.name}`, schemaErrors(o));
report("cross-references", crossErrors(objs));

const cm = objs.find((o) => o.kind === "ConfigMap");
report("haproxy -c on the ConfigMap's haproxy.cfg", haproxyCheck(cm, "/usr/local/etc/haproxy", "deploy/k8s"));
const k8sCfg = fs.readFileSync(path.join(root, "deploy/k8s/haproxy.cfg"), "utf8");
const loopbackCfg = fs.readFileSync(path.join(root, "deploy/haproxy/haproxy.cfg"), "utf8");
report("deploy/k8s/haproxy.cfg has deploy/haproxy/haproxy.cfg's settings", driftErrors(k8sCfg, loopbackCfg));

report("promtool check config", promtool(["check", "config", "deploy/prometheus/prometheus.yml"]));
report("promtool check rules", promtool(["check", "rules", "deploy/prometheus/alerts.yml"]));
report("promtool test rules", promtool(["test", "rules", "deploy/prometheus/alerts_test.yml"]));

const unitText = fs.readFileSync(path.join(root, "deploy/systemd/vlstack@.service"), "utf8");
const envText = fs.readFileSync(path.join(root, "deploy/systemd/vlstack-8081.env"), "utf8");
report("systemd-analyze verify vlstack@8081.service", unitErrors(unitText, "vlstack@8081.service"));
report("vlstack@.service and vlstack-8081.env agree", systemdErrors(unitText, envText));
const sysroot = fs.mkdtempSync(path.join(tmp, "sysusers-"));
const su = run("systemd-sysusers", ["--dry-run", `--root=${sysroot}`, path.join(root, "deploy/systemd/vlstack.sysusers")]);
report("systemd-sysusers vlstack.sysusers", su.status === 0 && /Creating user 'vlstack'/.test(su.stdout + su.stderr) ? [] : [`exit ${su.status}: ${su.stderr.trim()}`]);

// ================================================================ broken copies
const vlsOf = (o) => find(o, "Deployment", "vlstack");
const container = (o) => vlsOf(o).spec.template.spec.containers[0];
{
  const o = clone(objs);
  container(o).readinessProbe.httpGet.pathh = "/health/ready";
  expectRefused("an unknown field in a probe", schemaErrors(vlsOf(o)), /unknown field .*readinessProbe\.httpGet\.pathh/);
}
{
  const o = clone(objs);
  delete container(o).name;
  expectRefused("a container without a name", schemaErrors(vlsOf(o)), /required property name/);
}
{
  const o = clone(objs);
  vlsOf(o).spec.replicas = "3";
  expectRefused("replicas as a string", schemaErrors(vlsOf(o)), /replicas must be integer/);
}
{
  const o = clone(objs);
  find(o, "Service", "vlstack-replicas").spec.selector = { "app.kubernetes.io/name": "vlstak" };
  expectRefused("a Service selecting no pod", crossErrors(o), /Service\/vlstack-replicas: selector matches 0/);
}
{
  const o = clone(objs);
  vlsOf(o).spec.template.spec.terminationGracePeriodSeconds = 30;
  expectRefused("a grace period not above the drain timeout", crossErrors(o), /terminationGracePeriodSeconds 30 is not above --drain-timeout 30/);
}
{
  const o = clone(objs);
  container(o).livenessProbe.httpGet.path = "/health";
  expectRefused("liveness on /health", crossErrors(o), /livenessProbe is \/health on/);
}
{
  const o = clone(objs);
  const v = find(o, "Deployment", "vlstack-balancer").spec.template.spec.volumes.find((x) => x.configMap);
  v.configMap.items = v.configMap.items.filter((i) => i.key !== "conversation_key.lua");
  expectRefused("the Lua file left out of the mount", crossErrors(o), /lua-load .* is not a file of the ConfigMap mount/);
}
{
  const o = clone(objs);
  container(o).resources.limits.memory = "4Gi";
  container(o).resources.requests.memory = "4Gi";
  expectRefused("memory below the measured peak", crossErrors(o), /below the measured peak/);
}
{
  const o = clone(objs);
  const c2 = o.find((x) => x.kind === "ConfigMap");
  c2.data["haproxy.cfg"] = c2.data["haproxy.cfg"].replace("hash-type consistent", "hash-type consistant");
  expectRefused("a misspelt HAProxy keyword", haproxyCheck(c2, "/usr/local/etc/haproxy", "broken copy"), /haproxy -c \(broken copy\) exited [1-9]/);
}
expectRefused("a retry setting changed on one side only",
  driftErrors(k8sCfg.replace(/retry-on .*/, "retry-on conn-failure"), loopbackCfg), /defaults: only deploy\/k8s has "retry-on conn-failure"/);
{
  const dir = fs.mkdtempSync(path.join(tmp, "prom-"));
  fs.copyFileSync(path.join(root, "deploy/prometheus/alerts_test.yml"), path.join(dir, "alerts_test.yml"));
  const rules = fs.readFileSync(path.join(root, "deploy/prometheus/alerts.yml"), "utf8");
  fs.writeFileSync(path.join(dir, "alerts.yml"), rules.replace(/> 0\.05$/m, "> 0.5"));
  expectRefused("an alert threshold changed under its tests", promtool(["test", "rules", "alerts_test.yml"], dir), /exited 1/);
}
expectRefused("a unit with a misspelt value",
  unitErrors(unitText.replace("ProtectSystem=strict", "ProtectSystem=strikt"), "vlstack@8081.service"), /protect system value/i);
expectRefused("a stop timeout under the drain timeout",
  systemdErrors(unitText.replace(/^TimeoutStopSec=.*$/m, "TimeoutStopSec=20"), envText), /TimeoutStopSec 20 is not above/);

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
