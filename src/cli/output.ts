/**
 * Terminal output for the CLI: colour only when the stream is a TTY (and NO_COLOR is unset), a
 * spinner only on a TTY that can move its cursor, so logs, dumb terminals and test captures get
 * plain lines.
 */

import { shownText } from "../server/http/shown-text.js";

export interface Paint {
  bold(text: string): string;
  dim(text: string): string;
  green(text: string): string;
  red(text: string): string;
  yellow(text: string): string;
}

/** Where a command writes: the process's stdout or stderr, or a test's capture of them. */
export interface TextOutput {
  write(text: string): unknown;
  readonly isTTY?: boolean;
}

/** A terminal that takes escape sequences: `TERM=dumb` (an editor's shell buffer) shows them raw. */
function drivesCursor(stream: TextOutput, env: NodeJS.ProcessEnv): boolean {
  return Boolean(stream.isTTY) && env.TERM !== "dumb";
}

function wantsColour(stream: TextOutput, env: NodeJS.ProcessEnv): boolean {
  return drivesCursor(stream, env) && !env.NO_COLOR;
}

export function paintFor(stream: TextOutput, env: NodeJS.ProcessEnv = process.env): Paint {
  const on = wantsColour(stream, env);
  const wrap = (open: number, close: number) => (text: string) =>
    on ? `\u001b[${open}m${text}\u001b[${close}m` : text;
  return {
    bold: wrap(1, 22),
    dim: wrap(2, 22),
    green: wrap(32, 39),
    red: wrap(31, 39),
    yellow: wrap(33, 39),
  };
}

export interface Spinner {
  /**
   * Replaces the progress text. Where the spinner is plain lines, the new text is printed only if
   * `announce` is set.
   */
  update(text: string, announce?: boolean): void;
  /** Clears the spinner line; the final message is for the caller to print. */
  stop(): void;
}

const frames = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/**
 * A progress line on stderr. `text` may be a function, re-read each frame (a countdown).
 * Without a terminal that moves its cursor it prints the text once as a plain line, so CI logs
 * are not flooded and a dumb terminal shows no escape sequences.
 */
export function startSpinner(
  text: string | (() => string),
  stream: TextOutput = process.stderr,
  env: NodeJS.ProcessEnv = process.env,
): Spinner {
  let current = text;
  const render = () => (typeof current === "function" ? current() : current);
  if (!drivesCursor(stream, env)) {
    stream.write(`${render()}\n`);
    return {
      update(next, announce) {
        current = next;
        if (announce) stream.write(`${next}\n`);
      },
      stop() {},
    };
  }
  let frame = 0;
  const draw = () => stream.write(`\r\u001b[2K${frames[frame++ % frames.length]} ${render()}`);
  draw();
  const timer = setInterval(draw, 100);
  // The spinner must never keep the process alive on its own.
  timer.unref();
  return {
    update(next) {
      current = next;
      draw();
    },
    stop() {
      clearInterval(timer);
      stream.write("\r\u001b[2K");
    },
  };
}

/** A human line on stderr: progress and notes, never data a script would parse. */
export function note(line: string, stream: TextOutput = process.stderr): void {
  stream.write(`${line}\n`);
}

/** A result line on stdout. */
export function result(line: string, stream: TextOutput = process.stdout): void {
  stream.write(`${line}\n`);
}

/** JSON on stdout; every time (`created_at`, `last_used_at`, ...) as ISO 8601, not epoch ms. */
export function printJson(value: unknown, stream: TextOutput = process.stdout): void {
  stream.write(`${JSON.stringify(value, isoTimes, 2)}\n`);
}

function isoTimes(key: string, value: unknown): unknown {
  return key.endsWith("_at") && typeof value === "number" && Number.isFinite(value)
    ? new Date(value).toISOString()
    : value;
}

/** "2026-11-22 10:04 UTC"-style times for tables; "never" for null. */
export function formatTime(ms: number | null, never = "never"): string {
  return ms === null ? never : `${new Date(ms).toISOString().slice(0, 16).replace("T", " ")}`;
}

/** Left-aligned columns, two spaces apart. */
export function table(header: string[], raw: string[][]): string {
  // A cell may hold text someone else chose (a key's label, which any holder of the login key
  // sets): shown without the control characters that would drive the terminal.
  const rows = raw.map((row) => row.map(shownText));
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i])))
      .join("  ")
      .trimEnd();
  return [line(header), ...rows.map(line)].join("\n");
}
