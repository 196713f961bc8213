import { ADMIN_KEY, KEY, post } from "./gateway.js";

export interface Quota {
  object: string;
  account_id: string;
  tier: string;
  balance_idr: number;
  /** Held by requests and jobs in flight. */
  held_idr: number;
  payg: { enabled: boolean; limit_idr: number; spent_idr: number; resets_at: string } | null;
  subscription: {
    windows: { name: string; used: number; remaining: number; quota: number }[];
  } | null;
  free: {
    daily_limit: number;
    daily_used: number;
    daily_remaining: number;
    resets_at: string;
    requests_per_minute: number;
  };
  rate_limit: { requests_per_minute: number };
}

export async function quota(gw: { url: string }, key = KEY): Promise<Quota> {
  const res = await fetch(`${gw.url}/v1/account/quota`, {
    headers: { authorization: `Bearer ${key}` },
  });
  if (res.status !== 200) throw new Error(`quota: ${res.status} ${await res.text()}`);
  return (await res.json()) as Quota;
}

/** The account's balance and what is held from it, in micro-IDR, as its quota shows them. */
export async function money(
  gw: { url: string },
  key = KEY,
): Promise<{ balance: number; held: number }> {
  const shown = await quota(gw, key);
  return { balance: Math.round(shown.balance_idr * 1e6), held: Math.round(shown.held_idr * 1e6) };
}

/** `money` once nothing is held (a client that left is settled a moment after it went); at most 10 s. */
export async function idleMoney(
  gw: { url: string },
  key = KEY,
): Promise<{ balance: number; held: number }> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const now = await money(gw, key);
    if (now.held === 0 || Date.now() > deadline) return now;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

export interface LoggedRequest {
  state: string;
  input_tokens: number;
  output_tokens: number;
  cost_idr: number;
  tools_omitted?: string[];
}

/** The account's most recent request, as the usage report lists it. */
export async function lastLogged(gw: { url: string }, key = KEY): Promise<LoggedRequest> {
  const res = await fetch(`${gw.url}/v1/usage/requests?limit=1`, {
    headers: { authorization: `Bearer ${key}` },
  });
  return ((await res.json()) as { data: LoggedRequest[] }).data[0];
}

export function admin(
  gw: { url: string },
  method: string,
  path: string,
  body?: unknown,
): Promise<Response> {
  return fetch(`${gw.url}/api/admin${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

export async function errorOf(res: Response): Promise<{
  status: number;
  code?: string;
  type?: string;
  message: string;
  retryAfter: string | null;
}> {
  const retryAfter = res.headers.get("retry-after");
  const body = (await res.json()) as { error: { code?: string; type: string; message: string } };
  return {
    status: res.status,
    code: body.error.code,
    type: body.error.type,
    message: body.error.message,
    retryAfter,
  };
}

/** Fires `n` requests at once and returns their statuses in order. */
export async function burst(
  n: number,
  send: (i: number) => Promise<Response>,
): Promise<Response[]> {
  return Promise.all(Array.from({ length: n }, (_, i) => send(i)));
}

export { post };
