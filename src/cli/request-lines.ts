import type { FinishedRequest } from "../server/http/request-trace.js";
import { shownText } from "../server/http/shown-text.js";
import { MICRO } from "../store/money.js";
import { redactSecrets } from "../store/secrets.js";
import { paintFor } from "./output.js";

/**
 * `gateway serve`'s terminal: one line per finished request, like `stripe listen`. Lines are
 * gathered and written once per event-loop turn, so a burst costs one write, not one per request.
 */

/**
 * What a client chose (a model name, a key label, a path) with any gateway key in it redacted:
 * a key sent where the model goes (an SDK's two settings swapped) is not written to the log.
 */
const chosen = (text: string): string => redactSecrets(text, []);

/** The same as one line of a terminal shows it (`shownText`). */
const shown = (text: string): string => shownText(chosen(text));

export const logFormats = ["text", "json"] as const;
export type LogFormat = (typeof logFormats)[number];

export function requestLinePrinter(
  format: LogFormat,
  stream: NodeJS.WriteStream = process.stdout,
): (request: FinishedRequest) => void {
  const render = format === "json" ? jsonLine : textLine(paintFor(stream));
  let pending: string[] = [];
  const flush = () => {
    const lines = pending;
    pending = [];
    stream.write(lines.join(""));
  };
  return (request) => {
    if (browserNoise(request)) return;
    if (pending.length === 0) setImmediate(flush);
    pending.push(`${render(request)}\n`);
  };
}

/**
 * Only a request that took more than one attempt has steps worth a line's room, or one whose
 * provider could not be reached: its step says what to check (`unreachableStep`).
 */
function stepsShown(steps: string[] | undefined): steps is string[] {
  return (
    steps !== undefined &&
    (steps.length > 1 || steps.some((step) => step.includes(" unreachable: ")))
  );
}

function jsonLine(r: FinishedRequest): string {
  return JSON.stringify({
    time: new Date(r.finishedAt).toISOString(),
    request_id: r.requestId ?? null,
    method: r.method,
    path: chosen(r.path),
    status: r.status,
    ms: Math.round(r.durationMs * 10) / 10,
    model: r.model === undefined ? null : chosen(r.model),
    key: r.keyLabel === undefined ? null : chosen(r.keyLabel),
    cost_idr: r.costMicro === undefined ? null : r.costMicro / MICRO,
    input_tokens: r.inputTokens ?? null,
    output_tokens: r.outputTokens ?? null,
    provider: r.providerId ?? null,
    served_model: r.servedModel ?? null,
    stream: r.stream ?? false,
    error: r.errorCode ?? null,
    tools_omitted: r.toolsOmitted ?? null,
    burst_wait_ms: r.burstWaitMs ?? null,
    steps: stepsShown(r.steps) ? r.steps : null,
    via: r.via ?? null,
    aborted: r.aborted,
  });
}

function textLine(paint: ReturnType<typeof paintFor>) {
  return (r: FinishedRequest): string => {
    const time = clockTime(r.finishedAt);
    const failed = r.status >= 400 || r.errorCode !== undefined || r.aborted;
    const colour = r.status >= 500 || (r.status < 400 && failed) ? paint.red : paint.yellow;
    const status = failed ? colour(String(r.status)) : paint.green(String(r.status));
    const parts = [
      paint.dim(time),
      status,
      shown(`${r.method} ${r.path}`),
      r.model === undefined ? "-" : shown(r.model),
      `${r.durationMs < 10 ? r.durationMs.toFixed(1) : Math.round(r.durationMs)} ms`,
    ];
    if (r.costMicro !== undefined) parts.push(`IDR ${formatIdr(r.costMicro)}`);
    if (r.keyLabel !== undefined) parts.push(`key ${shown(r.keyLabel)}`);
    if (r.via) parts.push(`via ${r.via}`);
    if (r.stream) parts.push("stream");
    if (r.burstWaitMs !== undefined) parts.push(`spaced ${r.burstWaitMs} ms (burst)`);
    if (stepsShown(r.steps)) parts.push(shown(`steps: ${r.steps.join(" > ")}`));
    if (r.toolsOmitted)
      parts.push(paint.yellow(shown(`tools omitted: ${r.toolsOmitted.join(", ")}`)));
    if (r.errorCode !== undefined) parts.push(colour(r.errorCode));
    else if (r.aborted) parts.push(colour("client closed"));
    if (r.requestId !== undefined) parts.push(paint.dim(r.requestId));
    return parts.join("  ");
  };
}

/** Local HH:MM:SS (`toTimeString` would look up the time zone's name for every line). */
function clockTime(ms: number): string {
  const d = new Date(ms);
  const two = (n: number) => (n < 10 ? `0${n}` : String(n));
  return `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

/** Two decimals, or enough to show a cost under one rupiah that is not zero. */
function formatIdr(micro: number): string {
  const idr = micro / MICRO;
  if (micro === 0 || idr >= 0.01) return idr.toFixed(2);
  return idr.toPrecision(2);
}

/**
 * What a browser asks for on its own while the owner uses the dashboard (the page's script, its
 * icon, the dev tools' probe): answered, but not worth a line among the requests someone made.
 */
function browserNoise(r: FinishedRequest): boolean {
  if (r.method !== "GET" || r.status >= 500) return false;
  const p = r.path;
  return (
    p === "/favicon.ico" ||
    p.startsWith("/dashboard/assets/") ||
    p === "/robots.txt" ||
    p.startsWith("/apple-touch-icon") ||
    p.startsWith("/.well-known/")
  );
}
