import type { GoneSignal } from "../time/gone-signal.js";
import type { ClientStyle, CompletionRequest, JsonCompletion } from "../wire/completion-types.js";
import { renamedModelText } from "../wire/model-rename.js";
import { withJsonEstimate } from "../wire/to-client.js";
import { estimateRequestTokens, StreamMeter } from "../wire/usage.js";
import type { UpstreamHttp } from "./http-upstream.js";
import type { Attempt } from "./provider.js";

/** A completion's upstream stream, and the meter that bills it. */
export interface MeteredStream {
  /** The answer's server-sent events, as `postEvents` opens them. */
  events: Awaited<ReturnType<UpstreamHttp["postEvents"]>>;
  meter: StreamMeter;
}

/** A completion's call: `sent` is the body as it is sent, when the caller has it (`forwardedBody`). */
export interface CompletionCall {
  url: string;
  headers: Record<string, string>;
  body: object;
  sent?: string | Uint8Array;
  /** The answers the body asks for (chat's `n`): the stream's answer is whole once each finished. */
  answers?: number;
  /**
   * The input's estimate where the body's text is not all of it (a prompt of token ids); absent,
   * the body's text by the gateway's estimate.
   */
  inputTokens?: () => number;
}

/**
 * Sends a completion's body and reads its whole JSON answer (`read` makes it the client's), billed
 * as the provider reports it or else estimated from the body as sent. A client of the wire's own
 * style (`wire`) gets the answer's text as the provider wrote it, only its model renamed (unless
 * `read.restore` changed the answer).
 */
export async function postMeteredJson<T extends { model: string }>(
  http: UpstreamHttp,
  attempt: Attempt,
  call: CompletionCall,
  req: CompletionRequest,
  wire: ClientStyle,
  read: {
    answer: (json: T) => JsonCompletion;
    outputText: (json: T) => string;
    /** Undoes on the answer what rewriting the request did to it; true when it changed it. */
    restore?: (json: T) => boolean;
  },
): Promise<JsonCompletion> {
  const { url, headers, body } = call;
  const sent = call.sent ?? JSON.stringify(body);
  const answer = await http.postJsonText<T>(url, headers, sent, req.signal, attempt.provider);
  const json = answer.json;
  const restored = read.restore?.(json) === true;
  // A client of the wire's own style gets the provider's answer as written; any other, the
  // gateway's translation, whose usage says what is billed.
  const result = withJsonEstimate(
    read.answer(json),
    body,
    () => read.outputText(json),
    req.style === wire ? undefined : req.style,
    call.inputTokens,
  );
  if (req.style === wire && !restored)
    result.text = renamedModelText(answer.text, json.model, req.clientModel);
  return result;
}

/**
 * Sends a completion's body and opens the answer's events. The meter bills what the provider
 * reports; whatever it leaves out of the input is estimated from the body as sent, which is why
 * the two are made together.
 */
export async function openMeteredStream(
  http: UpstreamHttp,
  attempt: Attempt,
  call: CompletionCall,
  signal: GoneSignal,
): Promise<MeteredStream> {
  const { url, headers, body } = call;
  const sent = call.sent ?? JSON.stringify(body);
  const answer = http.postEvents(url, headers, sent, signal, attempt.provider);
  const meter = new StreamMeter(
    call.inputTokens ?? (() => estimateRequestTokens(body)),
    call.answers,
  );
  // The request is on its way: the input's estimate, which the stream's first delivery mark
  // bills, is made while the provider works on it rather than before the first piece goes out.
  meter.estimateInput();
  return { events: await answer, meter };
}
