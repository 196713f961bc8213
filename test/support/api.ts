import { ADMIN_KEY, KEY, post } from "./gateway.js";

export async function quota(
  gw: { url: string },
  key = KEY,
): Promise<Record<string, unknown> & { balance_idr: number }> {
  const res = await fetch(`${gw.url}/v1/account/quota`, {
    headers: { authorization: `Bearer ${key}` },
  });
  if (res.status !== 200) throw new Error(`quota: ${res.status} ${await res.text()}`);
  return (await res.json()) as Record<string, unknown> & { balance_idr: number };
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
