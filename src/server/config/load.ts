import { readFileSync } from "node:fs";
import type { ZodError } from "zod";
import { describeSystemError } from "../../system-errors.js";
import { isFreeModelName } from "../billing/pricing.js";
import { maxRouteNesting, maxRouteSteps } from "../dispatch/resolve.js";
import { providerOf, wireNames } from "../providers/registry.js";
import { builtInTiers, configSchema, type GatewayConfig } from "./schema.js";

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
    // A newcomer who ran the README's `--config gateway.json` before writing one: what to do.
    const missing = (err as NodeJS.ErrnoException).code === "ENOENT";
    throw new ConfigError([
      `cannot read ${file}: ${describeSystemError(err)}${missing ? "; write it (every field, with its default, is in docs/configuration.md) or give the path of yours" : ""}`,
    ]);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new ConfigError([`${file} is not valid JSON: ${jsonMistake(text, err as Error)}`]);
  }
  return parseConfig(raw, env, file);
}

/**
 * What is wrong with JSON that does not parse, and where, by line and column. JSON.parse's own
 * message quotes the text around the mistake, which in a config is often a provider key on the
 * line that broke: only its words are kept, and the place is found from the longest start of the
 * text that some JSON could still continue.
 */
function jsonMistake(text: string, err: Error): string {
  const reason = err.message
    .replace(/,? *(?:\.\.\.)?".*"(?:\.\.\.)? is not valid JSON$/s, "")
    .replace(/ at position \d+.*$/s, "")
    .replace(/ in JSON$/, "");
  let good = 0;
  let bad = text.length + 1;
  while (bad - good > 1) {
    const length = (good + bad) >> 1;
    if (continuable(text.slice(0, length))) good = length;
    else bad = length;
  }
  const before = text.slice(0, good).split("\n");
  return `${reason || "unexpected text"} at line ${before.length}, column ${before[before.length - 1].length + 1}`;
}

/** Whether some JSON starts with `prefix`: it parses, or fails only for want of what would follow. */
function continuable(prefix: string): boolean {
  try {
    JSON.parse(prefix);
    return true;
  } catch (err) {
    const { message } = err as Error;
    if (message === "Unexpected end of JSON input") return true;
    const at = / at position (\d+)/.exec(message);
    return at !== null && Number(at[1]) >= prefix.length;
  }
}

/** Validates a config value (already parsed JSON or an object from the programmatic API). */
export function parseConfig(
  raw: unknown,
  env: NodeJS.ProcessEnv = process.env,
  source = "config",
): GatewayConfig {
  const problems: string[] = [];
  const missing = new Map<string, string[]>();
  const used = new Map<string, string>();
  const substituted = substituteEnv(raw, env, [], missing, used);
  // One line per variable, however many places use it: the fix is one `export`.
  for (const [name, paths] of missing)
    problems.push(`environment variable ${name} is not set (used at ${paths.join(", ")})`);
  const parsed = configSchema.safeParse(substituted);
  if (!parsed.success) problems.push(...formatZodError(parsed.error));
  // References are checked on what parsed, or else on the raw value, so one run names every bad path.
  problems.push(...crossReferenceProblems(parsed.success ? parsed.data : substituted));
  if (problems.length > 0 || !parsed.success)
    throw new ConfigError(
      problems.map((problem) => asWritten(problem, used)),
      source,
    );
  return parsed.data;
}

/**
 * A problem that quotes a value the environment gave, with the value shown as the config wrote
 * it (`${NAME}`): the environment is where a config keeps its keys, and one put in the wrong
 * field (a BYOK key as its provider) is quoted by the refusal. A value under 8 characters is no
 * key, and replacing it could garble the words around it.
 */
function asWritten(problem: string, used: Map<string, string>): string {
  let out = problem;
  for (const [value, name] of [...used].sort(([a], [b]) => b.length - a.length)) {
    if (value.length >= 8) out = out.split(value).join(`\${${name}}`);
  }
  return out;
}

function substituteEnv(
  value: unknown,
  env: NodeJS.ProcessEnv,
  path: (string | number)[],
  missing: Map<string, string[]>,
  used: Map<string, string>,
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
      used.set(found, name);
      return found;
    });
  }
  if (Array.isArray(value))
    return value.map((v, i) => substituteEnv(v, env, [...path, i], missing, used));
  if (value && typeof value === "object") {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [
        k,
        substituteEnv(v, env, [...path, k], missing, used),
      ]),
    );
  }
  return value;
}

/** One line per issue, each naming its field (`models[0].name: ...`). */
export function formatZodError(error: ZodError): string[] {
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
  const nesting = new Map<string, string[] | "open">();
  const expansion = new Map<string, number | "open">();
  routeEntries.forEach((r, i) => {
    r.steps.forEach((step, j) => {
      if (step !== undefined && !models.has(step) && !routes.has(step)) {
        problems.push(`routes[${i}].steps[${j}]: unknown model or route "${step}"`);
      }
    });
    const cycle = r.name === undefined ? null : findCycle(r.name, routes);
    if (cycle) problems.push(`routes[${i}]: route cycle ${cycle.join(" -> ")}`);
    else if (r.name !== undefined) {
      const nested = deepestNesting(r.name, routes, nesting);
      if (nested.length - 1 > maxRouteNesting) {
        problems.push(
          `routes[${i}]: routes nest ${nested.length - 1} deep (${nested.join(" -> ")}); at most ${maxRouteNesting}`,
        );
      }
      const steps = expandedSteps(r.name, routes, expansion);
      if (steps > maxRouteSteps) {
        const count = Number.isSafeInteger(steps) ? String(steps) : "more than 2^53";
        problems.push(
          `routes[${i}]: expands to ${count} steps, at most ${maxRouteSteps}: a route's steps count again each time a step names it, so routes that name the same routes multiply`,
        );
      }
      // A paid route charges each step its own prices: a :free step in it would be served at
      // none, outside the free limits.
      const served = [...modelsOf(r.name, routes, models)];
      const free = served.filter(isFreeModelName);
      if (!isFreeModelName(r.name) && free.length > 0 && free.length < served.length) {
        problems.push(
          `routes[${i}]: mixes :free models (${free.join(", ")}) with paid ones, so those would be served outside the free limits; keep them in separate routes, or end the route's name in :free`,
        );
      }
    }
  });
  const tiers = config.tiers && typeof config.tiers === "object" ? config.tiers : {};
  const tierNames = new Set([...Object.keys(tiers), ...Object.keys(builtInTiers)]);
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
    const subscription =
      a.subscription && typeof a.subscription === "object" ? (a.subscription as Entry) : {};
    const subscriptionTier = text(subscription.tier);
    if (subscriptionTier !== undefined && !tierNames.has(subscriptionTier)) {
      problems.push(`accounts[${i}].subscription.tier: unknown tier "${subscriptionTier}"`);
    }
    // A subscription covers the names clients ask for: a typo would cover nothing, silently.
    (Array.isArray(subscription.models) ? subscription.models : []).forEach((name, j) => {
      if (typeof name === "string" && !models.has(name) && !routes.has(name)) {
        problems.push(`accounts[${i}].subscription.models[${j}]: unknown model or route "${name}"`);
      }
    });
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

/**
 * The longest chain of routes from `start` through routes it names (`start` first): past
 * `maxRouteNesting` the resolver stops following them. Each route's chain is worked out once
 * (`known`), so routes that share steps cost no more; a route on a cycle (reported on its own) is
 * not followed into again.
 */
function deepestNesting(
  start: string,
  routes: Map<string, string[]>,
  known: Map<string, string[] | "open">,
): string[] {
  const done = known.get(start);
  if (done === "open") return [];
  if (done) return done;
  known.set(start, "open");
  let deepest: string[] = [start];
  for (const step of routes.get(start) ?? []) {
    if (!routes.has(step)) continue;
    const below = [start, ...deepestNesting(step, routes, known)];
    if (below.length > deepest.length) deepest = below;
  }
  known.set(start, deepest);
  return deepest;
}

/**
 * How many steps a request walks through `start`: each of its steps, and a route step's own
 * expansion each time it is named (as the resolver walks them, `maxRouteSteps`). Each route's
 * count is worked out once (`known`); a route on a cycle (reported on its own) adds nothing again.
 */
function expandedSteps(
  start: string,
  routes: Map<string, string[]>,
  known: Map<string, number | "open">,
): number {
  const done = known.get(start);
  if (done === "open") return 0;
  if (done !== undefined) return done;
  known.set(start, "open");
  let total = 0;
  for (const step of routes.get(start) ?? [])
    total += 1 + (routes.has(step) ? expandedSteps(step, routes, known) : 0);
  known.set(start, total);
  return total;
}

/** The model names a route reaches through its steps and the routes among them. */
function modelsOf(
  name: string,
  routes: Map<string, string[]>,
  models: Set<string>,
  seen = new Set<string>(),
): Set<string> {
  const found = new Set<string>();
  seen.add(name);
  for (const step of routes.get(name) ?? []) {
    if (models.has(step)) found.add(step);
    else if (routes.has(step) && !seen.has(step))
      for (const model of modelsOf(step, routes, models, seen)) found.add(model);
  }
  return found;
}

/**
 * Depth-first search from one route; returns the looping path if the route reaches itself. A route
 * already searched from is not searched again: routes that share steps cost no more.
 */
function findCycle(start: string, routes: Map<string, string[]>): string[] | null {
  const searched = new Set<string>();
  const visit = (name: string, path: string[]): string[] | null => {
    for (const step of routes.get(name) ?? []) {
      if (step === start) return [...path, step];
      if (routes.has(step) && !searched.has(step)) {
        searched.add(step);
        const found = visit(step, [...path, step]);
        if (found) return found;
      }
    }
    return null;
  };
  return visit(start, [start]);
}
