import { readFileSync } from "node:fs";
import type { ZodError } from "zod";
import { describeSystemError } from "../../system-errors.js";
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
  if (problems.length > 0) throw new ConfigError(problems, source);
  const config = parsed.data as GatewayConfig;
  problems.push(...crossReferenceProblems(config));
  if (problems.length > 0) throw new ConfigError(problems, source);
  return config;
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

export function formatZodError(error: ZodError): string[] {
  return error.issues.map((issue) => `${formatPath(issue.path)}: ${issue.message}`);
}

function formatPath(path: readonly PropertyKey[]): string {
  if (path.length === 0) return "(root)";
  return path
    .map((p, i) => (typeof p === "number" ? `[${p}]` : i === 0 ? String(p) : `.${String(p)}`))
    .join("");
}

function crossReferenceProblems(config: GatewayConfig): string[] {
  const problems: string[] = [];
  const providers = new Set<string>();
  config.providers.forEach((p, i) => {
    if (providers.has(p.id)) problems.push(`providers[${i}].id: duplicate id "${p.id}"`);
    providers.add(p.id);
  });
  const models = new Set<string>();
  config.models.forEach((m, i) => {
    if (models.has(m.name)) problems.push(`models[${i}].name: duplicate name "${m.name}"`);
    models.add(m.name);
    if (!providers.has(m.provider)) {
      problems.push(`models[${i}].provider: unknown provider "${m.provider}"`);
    }
  });
  const routes = new Map<string, string[]>();
  config.routes.forEach((r, i) => {
    if (models.has(r.name)) problems.push(`routes[${i}].name: "${r.name}" is also a model name`);
    if (routes.has(r.name)) problems.push(`routes[${i}].name: duplicate name "${r.name}"`);
    routes.set(r.name, r.steps);
  });
  config.routes.forEach((r, i) => {
    r.steps.forEach((step, j) => {
      if (!models.has(step) && !routes.has(step)) {
        problems.push(`routes[${i}].steps[${j}]: unknown model or route "${step}"`);
      }
    });
    const cycle = findCycle(r.name, routes);
    if (cycle) problems.push(`routes[${i}]: route cycle ${cycle.join(" -> ")}`);
  });
  const tierNames = new Set([...Object.keys(config.tiers), "free"]);
  const keyIds = new Set<string>();
  const keyValues = new Set<string>(config.admin_keys);
  const accountIds = new Set<string>();
  config.accounts.forEach((a, i) => {
    if (accountIds.has(a.id)) problems.push(`accounts[${i}].id: duplicate id "${a.id}"`);
    accountIds.add(a.id);
    if (!tierNames.has(a.tier)) problems.push(`accounts[${i}].tier: unknown tier "${a.tier}"`);
    a.byok?.forEach((b, j) => {
      if (!providers.has(b.provider)) {
        problems.push(`accounts[${i}].byok[${j}].provider: unknown provider "${b.provider}"`);
      }
    });
    a.keys.forEach((k, j) => {
      if (keyIds.has(k.id))
        problems.push(`accounts[${i}].keys[${j}].id: duplicate key id "${k.id}"`);
      keyIds.add(k.id);
      if (keyValues.has(k.value)) {
        problems.push(`accounts[${i}].keys[${j}].value: the same key value is used twice`);
      }
      keyValues.add(k.value);
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
