import { readFileSync } from "node:fs";
import type { ZodError } from "zod";
import { describeSystemError } from "../../system-errors.js";
import { providerOf, wireNames } from "../providers/registry.js";
import { configSchema, type GatewayConfig } from "./schema.js";

export class ConfigError extends Error {
  constructor(
    readonly problems: string[],
    source = "config",
  ) {
    super(`invalid ${source}:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    this.name = "ConfigError";
  }
}

export function loadConfigFile(file: string, env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new ConfigError([`cannot read ${file}: ${describeSystemError(err)}`]);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new ConfigError([`${file} is not valid JSON: ${(err as Error).message}`]);
  }
  return parseConfig(raw, env, file);
}

/** Validates a config value (already parsed JSON or an object from the programmatic API). */
export function parseConfig(
  raw: unknown,
  env: NodeJS.ProcessEnv = process.env,
  source = "config",
): GatewayConfig {
  const problems: string[] = [];
  const missing = new Map<string, string[]>();
  const substituted = substituteEnv(raw, env, [], missing);
  // One line per variable, however many places use it: the fix is one `export`.
  for (const [name, paths] of missing)
    problems.push(`environment variable ${name} is not set (used at ${paths.join(", ")})`);
  const parsed = configSchema.safeParse(substituted);
  if (!parsed.success) problems.push(...formatZodError(parsed.error));
  // References are checked on what parsed, or else on the raw value, so one run names every bad path.
  problems.push(...crossReferenceProblems(parsed.success ? parsed.data : substituted));
  if (problems.length > 0 || !parsed.success) throw new ConfigError(problems, source);
  return parsed.data;
}

function substituteEnv(
  value: unknown,
  env: NodeJS.ProcessEnv,
  path: (string | number)[],
  missing: Map<string, string[]>,
): unknown {
  if (typeof value === "string") {
    return value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_, name: string) => {
      const found = env[name];
      if (found === undefined) {
        const paths = missing.get(name) ?? [];
        paths.push(formatPath(path));
        missing.set(name, paths);
        return `\${${name}}`;
      }
      return found;
    });
  }
  if (Array.isArray(value))
    return value.map((v, i) => substituteEnv(v, env, [...path, i], missing));
  if (value && typeof value === "object") {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k, substituteEnv(v, env, [...path, k], missing)]),
    );
  }
  return value;
}

function formatZodError(error: ZodError): string[] {
  return error.issues.map((issue) => `${formatPath(issue.path)}: ${issue.message}`);
}

function formatPath(path: readonly PropertyKey[]): string {
  if (path.length === 0) return "(root)";
  return path
    .map((p, i) => (typeof p === "number" ? `[${p}]` : i === 0 ? String(p) : `.${String(p)}`))
    .join("");
}

type Entry = Record<string, unknown>;

/** The entries of a config list, read leniently: the schema reports wrong shapes. */
function entries(value: unknown): Entry[] {
  if (!Array.isArray(value)) return [];
  return value.map((v) => (v && typeof v === "object" && !Array.isArray(v) ? (v as Entry) : {}));
}

function text(value: unknown): string | undefined {
  return typeof value === "string" ? value : undefined;
}

/**
 * Names, ids, references and rules that span fields, across the config; a value the schema
 * refused is skipped here.
 */
function crossReferenceProblems(raw: unknown): string[] {
  const config = raw && typeof raw === "object" ? (raw as Entry) : {};
  const problems: string[] = [];
  const providers = new Set<string>();
  entries(config.providers).forEach((p, i) => {
    const id = text(p.id);
    if (id === undefined) return;
    if (providers.has(id)) problems.push(`providers[${i}].id: duplicate id "${id}"`);
    providers.add(id);
  });
  entries(config.providers).forEach((p, i) => {
    const wire = text(p.wire);
    const known = wire !== undefined && (wireNames as string[]).includes(wire);
    if (known && providerOf({ wire }).needsBaseUrl && p.base_url === undefined) {
      problems.push(`providers[${i}].base_url: required for wire "${wire}"`);
    }
  });
  const models = new Set<string>();
  entries(config.models).forEach((m, i) => {
    const name = text(m.name);
    const provider = text(m.provider);
    if (name !== undefined) {
      if (models.has(name)) problems.push(`models[${i}].name: duplicate name "${name}"`);
      models.add(name);
    }
    if (provider !== undefined && !providers.has(provider)) {
      problems.push(`models[${i}].provider: unknown provider "${provider}"`);
    }
  });
  const routes = new Map<string, string[]>();
  const routeEntries = entries(config.routes).map((r) => ({
    name: text(r.name),
    steps: Array.isArray(r.steps) ? r.steps.map(text) : [],
  }));
  routeEntries.forEach((r, i) => {
    if (r.name === undefined) return;
    if (models.has(r.name)) problems.push(`routes[${i}].name: "${r.name}" is also a model name`);
    if (routes.has(r.name)) problems.push(`routes[${i}].name: duplicate name "${r.name}"`);
    routes.set(
      r.name,
      r.steps.filter((step): step is string => step !== undefined),
    );
  });
  routeEntries.forEach((r, i) => {
    r.steps.forEach((step, j) => {
      if (step !== undefined && !models.has(step) && !routes.has(step)) {
        problems.push(`routes[${i}].steps[${j}]: unknown model or route "${step}"`);
      }
    });
    const cycle = r.name === undefined ? null : findCycle(r.name, routes);
    if (cycle) problems.push(`routes[${i}]: route cycle ${cycle.join(" -> ")}`);
  });
  const tiers = config.tiers && typeof config.tiers === "object" ? config.tiers : {};
  const tierNames = new Set([...Object.keys(tiers), "free"]);
  const keyIds = new Set<string>();
  const keyValues = new Set<string>(
    Array.isArray(config.admin_keys) ? config.admin_keys.filter((k) => typeof k === "string") : [],
  );
  const accountIds = new Set<string>();
  entries(config.accounts).forEach((a, i) => {
    const id = text(a.id);
    if (id !== undefined) {
      if (accountIds.has(id)) problems.push(`accounts[${i}].id: duplicate id "${id}"`);
      accountIds.add(id);
    }
    const tier = a.tier === undefined ? "free" : text(a.tier);
    if (tier !== undefined && !tierNames.has(tier)) {
      problems.push(`accounts[${i}].tier: unknown tier "${tier}"`);
    }
    entries(a.byok).forEach((b, j) => {
      const provider = text(b.provider);
      if (provider !== undefined && !providers.has(provider)) {
        problems.push(`accounts[${i}].byok[${j}].provider: unknown provider "${provider}"`);
      }
    });
    entries(a.keys).forEach((k, j) => {
      const keyId = text(k.id);
      if (keyId !== undefined) {
        if (keyIds.has(keyId)) {
          problems.push(`accounts[${i}].keys[${j}].id: duplicate key id "${keyId}"`);
        }
        keyIds.add(keyId);
      }
      const value = text(k.value);
      if (value === undefined) return;
      if (keyValues.has(value)) {
        problems.push(`accounts[${i}].keys[${j}].value: the same key value is used twice`);
      }
      keyValues.add(value);
    });
  });
  return problems;
}

/** Depth-first search from one route; returns the looping path if the route reaches itself. */
function findCycle(start: string, routes: Map<string, string[]>): string[] | null {
  const visit = (name: string, path: string[]): string[] | null => {
    for (const step of routes.get(name) ?? []) {
      if (step === start) return [...path, step];
      if (routes.has(step) && !path.includes(step)) {
        const found = visit(step, [...path, step]);
        if (found) return found;
      }
    }
    return null;
  };
  return visit(start, [start]);
}
