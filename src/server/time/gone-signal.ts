/**
 * What the request path needs to know of a client that may leave: whether it has, and a way to be
 * told. An AbortSignal is one; `ClientGone` is a far cheaper one.
 */
export interface GoneSignal {
  readonly aborted: boolean;
  readonly reason: unknown;
  addEventListener(type: "abort", listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: "abort", listener: () => void): void;
}
