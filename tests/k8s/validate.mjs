// Validates Kubernetes objects (a JSON array on stdin) with the kubernetes-models packages,
// whose validators are generated from the Kubernetes OpenAPI and the KEDA and
// prometheus-operator CRDs. Prints one JSON array: per object, its errors ([] when valid).
import { readFileSync } from "node:fs";

// The package that models each API group; the core group and built-in groups are kubernetes-models.
const PACKAGES = {
  "keda.sh": "@kubernetes-models/keda",
  "monitoring.coreos.com": "@kubernetes-models/prometheus-operator",
};

async function errors(obj) {
  const [group, version] = obj.apiVersion.includes("/") ? obj.apiVersion.split("/") : ["", obj.apiVersion];
  const pkg = PACKAGES[group] ?? "kubernetes-models";
  const path = `${pkg}/${group ? `${group}/` : ""}${version}/${obj.kind}`;
  let Model;
  try {
    Model = (await import(path))[obj.kind];
  } catch {
    return [`no model for ${obj.apiVersion} ${obj.kind} (${path})`];
  }
  try {
    new Model(obj).validate();
    return [];
  } catch (e) {
    return e.message.split(", ");
  }
}

const objects = JSON.parse(readFileSync(0, "utf8"));
console.log(JSON.stringify(await Promise.all(objects.map(errors))));
