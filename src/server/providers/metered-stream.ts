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
  /** `text`: the body as it is sent, when the caller has it already (`forwardedText`). */
  call: { url: string; headers: Record<string, string>; body: object; text?: string },
  signal: GoneSignal,
): Promise<MeteredStream> {
  const { url, headers, body } = call;
  const sent = call.text ?? JSON.stringify(body);
  const events = await http.postEvents(url, headers, sent, signal, attempt.provider);
  return { events, meter: new StreamMeter(() => estimateRequestTokens(body)) };
}
