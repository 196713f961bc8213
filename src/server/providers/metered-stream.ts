import type { GoneSignal } from "../time/gone-signal.js";
import { estimateRequestTokens, StreamMeter } from "../wire/usage.js";
import type { UpstreamHttp } from "./http-upstream.js";
import type { Attempt } from "./provider.js";

/** A completion's upstream stream, and the meter that bills it. */
export interface MeteredStream {
  /** The answer's server-sent events, as `postEvents` opens them. */
  events: Awaited<ReturnType<UpstreamHttp["postEvents"]>>;
  meter: StreamMeter;
}

/**
 * Sends a completion's body and opens the answer's events. The meter bills what the provider
 * reports; whatever it leaves out of the input is estimated from the body as sent, which is why
 * the two are made together.
 */
export async function openMeteredStream(
  http: UpstreamHttp,
  attempt: Attempt,
  call: { url: string; headers: Record<string, string>; body: object },
  signal: GoneSignal,
): Promise<MeteredStream> {
  const { url, headers, body } = call;
  const events = await http.postEvents(
    url,
    headers,
    JSON.stringify(body),
    signal,
    attempt.provider,
  );
  return { events, meter: new StreamMeter(() => estimateRequestTokens(body)) };
}
