import type { Usage } from "./usage.js";

/** A stream is already encoded in the client's style: SSE text, or upstream bytes passed through. */
export type StreamPiece = string | Uint8Array;

/** `omittedTools`: tools the backend could not run, left out of the request it was sent. */
export type StreamCompletion = {
  kind: "stream";
  pieces: AsyncIterator<StreamPiece>;
  usage(): Usage;
  omittedTools?: string[];
};
