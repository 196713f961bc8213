import { expect } from "vitest";
import type { MaybeAsync, RequestLogRow } from "../../src/store/types.js";
import { idleMoney } from "./api.js";
import { ADMIN_KEY } from "./gateway.js";

/**
 * The gateway's metering rules as a client can compute them, for tests that check a charge from
 * what was sent and received.
 */

/** The estimate of a request's input where the provider reported none: its string values' characters (all but `model`), four to a token. */
export function requestTextTokens(body: unknown): number {
  const chars = (value: unknown): number => {
    if (typeof value === "string") return value.length;
    if (Array.isArray(value)) return value.reduce((sum: number, item) => sum + chars(item), 0);
    if (typeof value !== "object" || value === null) return 0;
    return Object.entries(value).reduce(
      (sum, [key, item]) => sum + (key === "model" ? 0 : chars(item)),
      0,
    );
  };
  const total = chars(body);
  return total === 0 ? 0 : Math.ceil(total / 4);
}

/** Output that reached the client, as the gateway counts it: each delta at least a token, and a token for every four characters. */
export function deliveredTokens(deltas: string[]): number {
  const nonEmpty = deltas.filter((delta) => delta.length > 0);
  const chars = nonEmpty.reduce((sum, delta) => sum + delta.length, 0);
  return Math.max(nonEmpty.length, chars === 0 ? 0 : Math.ceil(chars / 4));
}

/**
 * The request's log row once the gateway has written it with `errorCode`: a client that hangs up
 * is settled a moment after it has gone. Polled for at most 2 s; then whatever the log holds.
 */
export async function loggedAs(
  store: {
    requestOf(accountId: string, id: string): MaybeAsync<RequestLogRow | undefined>;
  },
  accountId: string,
  id: string,
  errorCode: string,
): Promise<RequestLogRow | undefined> {
  for (let i = 0; i < 100 && (await store.requestOf(accountId, id))?.error_code !== errorCode; i++)
    await new Promise((resolve) => setTimeout(resolve, 20));
  return store.requestOf(accountId, id);
}

/** A request's row as `/api/admin/requests` lists it. */
export interface Logged {
  id: string;
  state: string;
  error_code: string | null;
  /** The account the request was served for. */
  account: string;
  cost_micro: number;
  usage: { input_tokens: number; output_tokens: number };
}

/** Every request the gateway logged (up to 1,000), newest first, as an admin reads them. */
export async function logged(gw: { url: string }): Promise<Logged[]> {
  const res = await fetch(`${gw.url}/api/admin/requests?limit=1000`, {
    headers: { authorization: `Bearer ${ADMIN_KEY}` },
  });
  return ((await res.json()) as { data: Logged[] }).data;
}

/**
 * The requests `gw` logged since it had `before` rows: the balance dropped since `was` by what
 * they were charged, none below zero, and nothing stays held.
 */
export async function ledgerAgrees(
  gw: { url: string },
  before: number,
  was: { balance: number },
): Promise<{ rows: Logged[] }> {
  const after = await idleMoney(gw);
  const all = await logged(gw);
  const rows = all.slice(0, all.length - before);
  expect(after.held, "nothing stays held").toBe(0);
  const charged = rows.reduce((sum, row) => sum + row.cost_micro, 0);
  expect(was.balance - after.balance, JSON.stringify(rows)).toBe(charged);
  for (const row of rows) expect(row.cost_micro, JSON.stringify(row)).toBeGreaterThanOrEqual(0);
  return { rows };
}

/** The output a client read, as the gateway counts it: the characters of each kind of delta. */
export function outputIn(
  style: "chat" | "messages" | "responses" | "completions",
  event: string | undefined,
  data: unknown,
): string[] {
  // biome-ignore lint/suspicious/noExplicitAny: events of four styles, read as a client reads them
  const d = data as Record<string, any>;
  const out: string[] = [];
  if (style === "completions") {
    for (const choice of d.choices ?? [])
      if (typeof choice.text === "string") out.push(choice.text);
  } else if (style === "chat") {
    for (const choice of d.choices ?? []) {
      const delta = choice.delta ?? {};
      for (const text of [delta.content, delta.reasoning_content, delta.reasoning, delta.refusal])
        if (typeof text === "string") out.push(text);
      for (const call of delta.tool_calls ?? [])
        for (const text of [call.function?.name, call.function?.arguments])
          if (typeof text === "string") out.push(text);
    }
  } else if (style === "messages") {
    if (event === "content_block_delta")
      for (const text of [d.delta?.text, d.delta?.partial_json, d.delta?.thinking])
        if (typeof text === "string") out.push(text);
    if (event === "content_block_start" && d.content_block?.type === "tool_use")
      out.push(d.content_block.name);
  } else {
    if (event?.endsWith(".delta") && typeof d.delta === "string") out.push(d.delta);
    if (event === "response.output_item.added" && d.item?.type === "function_call")
      out.push(d.item.name);
  }
  return out.filter((text) => text !== "");
}
