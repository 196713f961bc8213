import type { StreamMeter, Usage } from "./usage.js";

/** A stream is already encoded in the client's style: SSE text, or upstream bytes passed through. */
export type StreamPiece = string | Uint8Array;

/** `omittedTools`: tools the backend could not run, left out of the request it was sent. */
export type StreamCompletion = {
  kind: "stream";
  pieces: AsyncIterator<StreamPiece>;
  /** What the stream is billed; its writer tells it which pieces were written. */
  meter: StreamMeter;
  omittedTools?: string[];
  /**
   * The stream's own last events when it breaks after it started, for a style whose events carry
   * the stream's state (Responses: the numbering and the Response so far, whose usage is `billed`,
   * what the broken stream is charged); without it the route ends the stream with its style's
   * generic error event.
   */
  errorEvent?: (message: string, code: string, billed: Usage) => string;
};
