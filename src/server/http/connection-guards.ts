import { once } from "node:events";
import {
  type IncomingMessage,
  type RequestListener,
  type Server,
  type ServerOptions,
  ServerResponse,
} from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import { clearInterval, performanceNow, setInterval } from "../../host-timers.js";
import { newId } from "../../store/secrets.js";
import { malformedHost } from "./host.js";
import { canonicalAddress } from "./request.js";
import { publishUnparsed, type TraceSource, traceOf } from "./request-trace.js";
import { type MethodsTaken, routeMethods } from "./route-row.js";
import { targetPath, unreadableTarget } from "./target.js";

/**
 * The server's own limits on connections, so a slow or idle client cannot hold a socket for as
 * long as Node's defaults allow, and one address cannot take every socket:
 *   headersTimeoutMs     the request line and headers must arrive within this (408 otherwise)
 *   requestTimeoutMs     the whole request, body included, within this; it ends once the request
 *                        is received, so a long streamed answer is never cut by it
 *   keepAliveTimeoutMs   an idle keep-alive connection is closed after this
 *   maxConnectionsPerIp  open connections one client address may hold; beyond it the new
 *                        connection gets a plain 503 and is closed (0: no cap)
 *   sendTimeoutMs        a connection whose client has taken nothing of its answer for this long
 *                        (the answer waits on the connection's full buffers) is closed (0: none)
 */
export interface ConnectionLimits {
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  maxConnectionsPerIp: number;
  sendTimeoutMs: number;
}

/**
 * Generous for real clients: headers come in one packet, the largest body allowed fits in the
 * request time on a slow link. The per-address cap is sized for a developer's machine, whose
 * tools and agents together hold a few dozen connections; a gateway behind a proxy, where every
 * client shares the proxy's address, raises it (`--max-connections-per-ip`).
 */
export const defaultConnectionLimits: ConnectionLimits = {
  headersTimeoutMs: 15_000,
  requestTimeoutMs: 120_000,
  keepAliveTimeoutMs: 5_000,
  maxConnectionsPerIp: 128,
  sendTimeoutMs: 60_000,
};

/** Node checks the header and request timeouts on a timer; this bounds how late it notices. */
const maxCheckIntervalMs = 1_000;

/** Options for `createServer`; refuses a header timeout longer than the request timeout. */
export function connectionServerOptions(limits: ConnectionLimits): ServerOptions {
  const { headersTimeoutMs, requestTimeoutMs } = limits;
  if (requestTimeoutMs > 0 && headersTimeoutMs > requestTimeoutMs) {
    throw new RangeError(
      `the header timeout (${headersTimeoutMs} ms) cannot be longer than the request timeout (${requestTimeoutMs} ms)`,
    );
  }
  const shortest = Math.min(...[headersTimeoutMs, requestTimeoutMs].filter((ms) => ms > 0));
  return {
    headersTimeout: headersTimeoutMs,
    requestTimeout: requestTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    // Node's own 400 for a request without Host says nothing and carries no request id:
    // `refuseUnservable` answers it instead.
    requireHostHeader: false,
    connectionsCheckingInterval: checkInterval(shortest),
  };
}

/**
 * Bytes the socket handed to its handle that the kernel has not taken yet: they leave only as the
 * client reads.
 */
function bytesAwaitingClient(socket: Socket): number {
  return (socket as { _handle?: { writeQueueSize?: number } | null })._handle?.writeQueueSize ?? 0;
}

/** How often a timeout of `boundMs` is checked: it is noticed at most this late. */
function checkInterval(boundMs: number): number {
  return Math.max(10, Math.min(maxCheckIntervalMs, Math.floor(boundMs / 2)));
}

/**
 * Installs the per-address cap and the plain answers for what Node would otherwise refuse with
 * an empty 400, 417 or 431 or a silent close: malformed requests, unknown methods, oversized
 * headers, timeouts, expectations it does not meet, and CONNECT (this gateway is not a proxy).
 * Answers the server's connections, for a stop that drains or cuts them.
 */
export function guardConnections(server: Server, limits: ConnectionLimits): ServerConnections {
  // Node's option alone is not applied to the server on every version this package supports.
  server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  const connections = new ServerConnections(server);
  if (limits.maxConnectionsPerIp > 0) capPerAddress(server, limits.maxConnectionsPerIp);
  if (limits.sendTimeoutMs > 0) connections.closeStalled(limits.sendTimeoutMs);
  server.on("clientError", (err: NodeJS.ErrnoException, socket: Duplex) => {
    const sent = requestLineOf(err);
    const answer = clientErrorAnswer(err, limits, connections.methodsOf(sent.target));
    if (!answer || !socket.writable || responseStarted(socket) || answeredWhileArriving(socket)) {
      socket.destroy();
      return;
    }
    // A request whose headers came and whose body did not (in time, or as valid HTTP) already has
    // its id and its line in serve's log: it is answered as itself, so the client's id finds that
    // line, and the line says what the client was told.
    const underWay = responseWaiting(socket);
    if (underWay) refuse(underWay.req, underWay, answer.status, answer.code, answer.text);
    else {
      const requestId = newId("req");
      socket.end(
        plainResponse(requestId, answer.status, answer.reason, answer.text, answer.headers),
      );
      connections.answered(socket, {
        requestId,
        ...sent,
        status: answer.status,
        code: answer.code,
      });
    }
  });
  // Node's own answer to an Expect other than 100-continue is an empty 417 with no request id
  // and no line in serve's log: the request goes to the listener, which refuses it
  // (`refuseUnservable`) as it answers every request.
  server.on("checkExpectation", (req: IncomingMessage, res: ServerResponse) => {
    server.emit("request", req, res);
  });
  // Node would invite the body (100 Continue) before anyone looked at the headers, so a request
  // refused from them alone (no key, a declared length over the limit, no such route) was sent
  // its body for nothing: the invitation goes out when the body is first read.
  server.on("checkContinue", (req: IncomingMessage, res: ServerResponse) => {
    continueOnRead(req, res);
    server.emit("request", req, res);
  });
  server.on("connect", (req: IncomingMessage, socket: Duplex) => {
    const requestId = newId("req");
    socket.end(
      plainResponse(
        requestId,
        405,
        "Method Not Allowed",
        "CONNECT is not supported: this is an API gateway, not a proxy.",
        { allow: allowedMethods },
      ),
    );
    connections.answered(socket, {
      requestId,
      method: "CONNECT",
      target: req.url ?? "",
      status: 405,
      code: "method_not_allowed",
    });
  });
  return connections;
}

/** What Node keeps on a socket of its HTTP server: the answer being written on it. */
type ServedSocket = Socket & { _httpMessage?: ServerResponse | null };

/**
 * The server's connections, for a stop. Node's `server.close()` waits for every socket but
 * closes only those it counts as idle: a new connection that has sent nothing yet is not one, a
 * connection whose answer is under way stays open for the keep-alive time after it, and one
 * handed over (a CONNECT, a request Node could not parse, each answered here and half-closed, as
 * its client may still be reading) stays until its client closes it, which may be never.
 */
export class ServerConnections {
  private readonly sockets = new Set<ServedSocket>();
  /** Sockets answered outside Node's HTTP handling: nothing more is served on them. */
  private readonly handedOver = new WeakSet<Duplex>();
  /** Answers that close their connection once written. */
  private readonly watched = new WeakSet<ServerResponse>();
  private draining = false;
  /** While draining: which request of a connection opened since may still be served. */
  private takesLate: (incoming: IncomingMessage) => boolean = () => false;
  /** Connections opened while the server drains. */
  private readonly late = new WeakSet<Socket>();
  /** What the gateway serves, once it does: for the lines and the answers given here. */
  private gateway?: { source: TraceSource; methodsTaken: MethodsTaken };

  constructor(private readonly server: Server) {
    server.on("connection", (socket: Socket) => {
      this.sockets.add(socket);
      if (this.draining) this.late.add(socket);
      socket.once("close", () => this.sockets.delete(socket));
    });
  }

  /** Once the gateway serves: its lines' source, and the methods each path takes. */
  serving(source: TraceSource, methodsTaken: MethodsTaken): void {
    this.gateway = { source, methodsTaken };
  }

  /** The methods the request target's path takes, once the gateway serves. */
  methodsOf(target: string): ReturnType<MethodsTaken> | undefined {
    return target === "" ? undefined : this.gateway?.methodsTaken(targetPath(target));
  }

  /**
   * `socket` was answered and ended outside Node's HTTP handling, with the answer `line` says:
   * it is a line in serve's log, as every answer is.
   */
  answered(socket: Duplex, line: Parameters<typeof publishUnparsed>[1]): void {
    this.handedOver.add(socket);
    if (this.gateway) publishUnparsed(this.gateway.source, line);
    if (this.draining) (socket as Socket).destroySoon();
  }

  /** `listener`, whose answers close their connection once the server drains. */
  listener(listener: RequestListener): RequestListener {
    return (incoming, outgoing) => {
      if (this.draining) {
        // A connection opened during the drain is served only what `drain` takes; any other
        // request is not taken, as one still arriving when the stop began: its client may send
        // it elsewhere.
        if (this.late.has(incoming.socket) && !this.takesLate(incoming)) {
          incoming.socket.destroy();
          return;
        }
        this.closeAfter(outgoing, incoming.socket);
      }
      listener(incoming, outgoing);
    };
  }

  /**
   * Stops the connections taking requests: each answer under way closes its connection once it
   * is written, every other connection closes now (idle, or with a request not yet whole: its
   * client sees the connection close before its request was taken, and may send it elsewhere).
   * A connection opened after this is served only the requests `takes` (a word about work
   * already in flight, which can come on no other connection), each closing it once answered.
   * `underWay`: the answers under way; `finished` resolves once each has been written and its
   * connection closed, when the connections still open with nothing under way are closed too.
   */
  drain(takes: (incoming: IncomingMessage) => boolean): {
    underWay: number;
    finished: Promise<void>;
  } {
    this.draining = true;
    this.takesLate = takes;
    const closed: Promise<unknown>[] = [];
    for (const socket of this.sockets) {
      const answer = socket._httpMessage;
      if (answer && !answer.writableFinished) {
        closed.push(once(socket, "close").catch(() => {}));
        this.closeAfter(answer, socket);
      } else if (this.handedOver.has(socket)) socket.destroySoon();
      else socket.destroy();
    }
    const finished = Promise.all(closed).then(() => {
      for (const socket of this.sockets) {
        const answer = socket._httpMessage;
        if (!answer || answer.writableFinished) socket.destroySoon();
      }
    });
    return { underWay: closed.length, finished };
  }

  /**
   * Closes each connection whose answer has waited `boundMs` on its full buffers without its client
   * taking any of it. Node's timeouts end once the request is in, so a client that stops reading
   * (or never starts) would otherwise hold its connection, and a stream its hold, for as long as it
   * stays connected. A client that reads, however slowly, takes some of what waits: each time it
   * does, the wait starts again. A stream cut here ends as one its client left: charged what
   * reached it, its hold given back, its line written.
   */
  closeStalled(boundMs: number): void {
    /** Since when each stalled connection's client took nothing, and what waited then. */
    const stalls = new WeakMap<Socket, { since: number; queued: number }>();
    const check = () => {
      const now = performanceNow();
      for (const socket of this.sockets) {
        if (!socket.writableNeedDrain) {
          stalls.delete(socket);
          continue;
        }
        const queued = bytesAwaitingClient(socket);
        const stall = stalls.get(socket);
        if (!stall) {
          stalls.set(socket, { since: now, queued });
          socket.once("drain", () => stalls.delete(socket));
        } else if (queued < stall.queued) {
          // One large write (a whole answer) drains only once all of it is taken: less of it
          // waiting is a client that reads, however slowly.
          stall.since = now;
          stall.queued = queued;
        } else if (now - stall.since >= boundMs) socket.destroy();
        else stall.queued = queued;
      }
    };
    const timer = setInterval(check, checkInterval(boundMs));
    timer.unref();
    this.server.once("close", () => clearInterval(timer));
  }

  /** Cuts every connection, answers under way included. */
  cut(): void {
    this.server.closeAllConnections();
    for (const socket of this.sockets) socket.destroy();
  }

  private closeAfter(outgoing: ServerResponse, socket: ServedSocket): void {
    if (this.watched.has(outgoing)) return;
    this.watched.add(outgoing);
    // Said in the answer's headers when they have not gone yet, so the client sends no more.
    outgoing.shouldKeepAlive = false;
    outgoing.once("finish", () => {
      // Node has let go of the socket by now, or given it to the answer of a request pipelined
      // behind this one, which closes it in turn.
      const next = socket._httpMessage;
      if (next) this.closeAfter(next, socket);
      else socket.destroySoon();
    });
  }
}

/**
 * `listener`, with a request pipelined behind others on its connection run in its turn. Node
 * answers a connection's requests in order but would run them at once, the later answers held in
 * memory; past the socket's buffer of them Node stops reading the connection, and then no request
 * on it sees its client hang up: each runs to its end and is charged, with nobody to receive it.
 * Node gives a response its socket when its turn comes; a request waits for that, and one whose
 * connection closes first never runs. One whose body would not fit the buffer Node reads it into
 * cannot wait (its unread body stops the connection's reading too, and the request timeout would
 * end the connection): it runs at once, and is told when the connection closes.
 */
export function inTurn(listener: RequestListener): RequestListener {
  return (incoming, outgoing) => {
    if (outgoing.socket) listener(incoming, outgoing);
    else if (bodyFitsBuffer(incoming)) outgoing.once("socket", () => listener(incoming, outgoing));
    else {
      closeWithConnection(incoming.socket, outgoing);
      listener(incoming, outgoing);
    }
  };
}

/** Every method some route serves, as an `Allow` header of the server as a whole. */
const allowedMethods = ["GET", "HEAD", ...routeMethods.filter((m) => m !== "GET")].join(", ");

/**
 * `listener`, with the requests HTTP/1.1 says a server must refuse refused in words, where Node's
 * own answers (with `requireHostHeader`, or without a `checkExpectation` listener) are empty: one
 * that carries no Host header (400, RFC 9112) and one that expects what this server does not
 * meet (417; `Expect: 100-continue` is met when the body is read). `OPTIONS *`, a question about
 * the server as a whole, is answered with the methods it serves (RFC 9110), and `*` for any other
 * method refused. A target the routes cannot read (`unreadableTarget`), which Hono's adapter
 * would refuse with no code for the line, is a 400 here; an absolute-form target naming another
 * host (`publicOrigin`: the gateway's, read at each request) is a 421, as this is no proxy. A Host
 * that cannot name the gateway (`malformedHost`) is a 400 `malformed_host` here, for every route
 * alike: the direct router and Hono's adapter then both take the Host of every request they get
 * (an absolute-form target's own host is the one that counts, RFC 9112).
 * Inside the request ids and the trace, so each has its id and its line in serve's log.
 */
export function refuseUnservable(
  listener: RequestListener,
  publicOrigin: () => string | undefined,
): RequestListener {
  return (incoming, outgoing) => {
    const { host, expect } = incoming.headers;
    const target = incoming.url ?? "";
    const unreadable = target === "*" ? undefined : unreadableTarget(target);
    if (unreadable !== undefined) {
      refuse(
        incoming,
        outgoing,
        400,
        "malformed_request",
        `The request target cannot be read (${unreadable}): send a path such as /v1/models, with the gateway's address as Host.`,
      );
    } else if (
      !target.startsWith("/") &&
      target !== "*" &&
      !namesThisGateway(new URL(target), incoming, publicOrigin())
    ) {
      refuse(
        incoming,
        outgoing,
        421,
        "misdirected_request",
        "The request target names another host: this is an API gateway, not a proxy. Send the path alone (such as GET /v1/models) to the gateway's own address.",
      );
    } else if (host === undefined && incoming.httpVersion === "1.1") {
      refuse(
        incoming,
        outgoing,
        400,
        "malformed_request",
        "An HTTP/1.1 request must carry a Host header (RFC 9112): send the one for the gateway's address.",
      );
    } else if (host && target.startsWith("/") && malformedHost(host)) {
      refuse(
        incoming,
        outgoing,
        400,
        "malformed_host",
        "The Host header cannot be read as the gateway's address: send the address the gateway listens on as Host, such as 127.0.0.1:8787.",
      );
    } else if (incoming.url === "*") {
      if (incoming.method === "OPTIONS") {
        outgoing.writeHead(200, { allow: allowedMethods, "content-length": 0 });
        outgoing.end();
      } else {
        refuse(
          incoming,
          outgoing,
          400,
          "malformed_request",
          `The request target * is for OPTIONS only: send ${incoming.method} to a path, such as /v1/models.`,
        );
      }
    } else if (expect !== undefined && !continueExpected.test(expect)) {
      refuse(
        incoming,
        outgoing,
        417,
        "expectation_failed",
        "The only Expect this server meets is 100-continue: send the request without the other Expect header.",
      );
    } else listener(incoming, outgoing);
  };
}

/**
 * Whether an absolute-form target (`http://host:port/path`, RFC 9112) names this gateway: its
 * public origin, or the address and port the client's connection reached (`localhost` for a
 * loopback one). Any other is a request for a proxy, which a client sends only when told to use
 * this server as one.
 */
function namesThisGateway(
  target: URL,
  incoming: IncomingMessage,
  publicOrigin: string | undefined,
): boolean {
  if (target.origin === publicOrigin) return true;
  const { localAddress, localPort } = incoming.socket;
  const port = target.port === "" ? (target.protocol === "https:" ? 443 : 80) : Number(target.port);
  if (localAddress === undefined || port !== localPort) return false;
  const local = canonicalAddress(localAddress);
  if (target.hostname === "localhost") return local === "::1" || local?.startsWith("127.") === true;
  return local !== undefined && canonicalAddress(target.hostname) === local;
}

/** Node's own test of an Expect header it answers with 100 Continue. */
const continueExpected = /(?:^|\W)100-continue(?:$|\W)/i;

/**
 * Sends `100 Continue` when the request's body is first asked for (a reader's first `_read`),
 * unless the answer went out first. A request answered without it has its connection closed
 * after the answer (Node's rule: its client may still send the body it was not asked for).
 */
function continueOnRead(incoming: IncomingMessage, outgoing: ServerResponse): void {
  const read = incoming._read;
  incoming._read = function (this: IncomingMessage, size: number) {
    incoming._read = read;
    if (!outgoing.headersSent && !outgoing.writableEnded) outgoing.writeContinue();
    read.call(this, size);
  };
}

function refuse(
  incoming: IncomingMessage,
  outgoing: ServerResponse,
  status: number,
  code: string,
  text: string,
): void {
  const trace = traceOf(incoming);
  if (trace) trace.errorCode = code;
  answerPlain(outgoing, status, text);
}

/** Node reads the connection on past a body that fits the request's buffer, read or not. */
function bodyFitsBuffer(incoming: IncomingMessage): boolean {
  if (incoming.headers["transfer-encoding"] !== undefined) return false;
  return Number(incoming.headers["content-length"] ?? 0) < incoming.readableHighWaterMark;
}

/**
 * Node emits a response's 'close' from the socket it was given, so one still waiting for its turn
 * never hears its connection close: it is closed here as Node closes the one under way, which
 * ends its request's waits and provider calls.
 */
function closeWithConnection(socket: Duplex, outgoing: ServerResponse): void {
  const closed = () => {
    if (outgoing.socket) return;
    outgoing.destroy();
    outgoing.emit("close");
  };
  socket.once("close", closed);
  outgoing.once("socket", () => socket.off("close", closed));
}

function capPerAddress(server: Server, cap: number): void {
  const open = new Map<string, number>();
  server.on("connection", (socket: Socket) => {
    const address = socket.remoteAddress ?? "unknown";
    const count = open.get(address) ?? 0;
    if (count >= cap) {
      socket.end(
        plainResponse(
          newId("req"),
          503,
          "Service Unavailable",
          `Too many open connections from your address (the limit is ${cap}); close some or reuse them.`,
          { "retry-after": "1" },
        ),
      );
      socket.destroySoon();
      return;
    }
    open.set(address, count + 1);
    socket.once("close", () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left === 0) open.delete(address);
      else open.set(address, left);
    });
  });
}

interface PlainAnswer {
  status: number;
  reason: string;
  text: string;
  /** Why, for the line in serve's log of a request whose answer this is. */
  code: string;
  headers?: Record<string, string>;
}

/**
 * What to tell a client whose request Node could not take; undefined when nobody is listening.
 * `methods`: those the path of its request line takes, when it could be read.
 */
function clientErrorAnswer(
  err: NodeJS.ErrnoException,
  limits: ConnectionLimits,
  methods: ReturnType<MethodsTaken> | undefined,
): PlainAnswer | undefined {
  switch (err.code) {
    case "ECONNRESET":
    case "EPIPE":
      return undefined;
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return {
        status: 408,
        reason: "Request Timeout",
        code: "request_timeout",
        text: `The request did not arrive in time: headers are allowed ${seconds(limits.headersTimeoutMs)} and the whole request ${seconds(limits.requestTimeoutMs)}.`,
      };
    case "HPE_HEADER_OVERFLOW":
      return {
        status: 431,
        reason: "Request Header Fields Too Large",
        code: "headers_too_large",
        text: "The request's headers are larger than this server accepts; send fewer or shorter headers.",
      };
    case "HPE_INVALID_METHOD": {
      const path = methods && methods.takes.length > 0 ? methods : undefined;
      return {
        status: 400,
        reason: "Bad Request",
        code: "malformed_request",
        text: path
          ? `The request method is not one this server understands; this path takes ${path.takes.join(", ")}.`
          : `The request method is not one this server understands; it serves ${allowedMethods}.`,
        headers: { allow: path?.allow ?? allowedMethods },
      };
    }
    default: {
      const why = (err as { reason?: unknown }).reason;
      return {
        status: 400,
        reason: "Bad Request",
        code: "malformed_request",
        text: `The request is not valid HTTP/1.1${typeof why === "string" ? ` (${why.toLowerCase()})` : ""}.`,
      };
    }
  }
}

function seconds(ms: number): string {
  return ms > 0 ? `${ms / 1000} s` : "no limit";
}

/** A response is already on its way on this connection: nothing more can be said on it. */
function responseStarted(socket: Duplex): boolean {
  const current = (socket as { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  return current?.headersSent === true;
}

/**
 * The request this connection is receiving was answered before its body came (a refusal from its
 * headers, its body then read to be dropped): the answer was its one answer, so a body that does
 * not come in time, or not as valid HTTP, closes the connection without another.
 */
function answeredWhileArriving(socket: Duplex): boolean {
  const arriving = (socket as { parser?: { incoming?: IncomingMessage | null } | null }).parser
    ?.incoming;
  const current = (socket as { _httpMessage?: unknown })._httpMessage;
  return arriving != null && !arriving.complete && current == null;
}

/**
 * The response of the request this connection is at, when it has not begun: a request whose
 * headers came and whose body is still awaited.
 */
function responseWaiting(socket: Duplex): ServerResponse | undefined {
  const current = (socket as { _httpMessage?: unknown })._httpMessage;
  return current instanceof ServerResponse && !current.headersSent ? current : undefined;
}

/**
 * A plain answer on a request's own response, with the headers it already has (its request id,
 * a route's CORS headers), and the connection closed after it: what remains of the request, if
 * anything still comes, is not read.
 */
function answerPlain(res: ServerResponse, status: number, text: string): void {
  const body = `${text}\n`;
  res.writeHead(status, {
    "content-type": "text/plain; charset=utf-8",
    "content-length": Buffer.byteLength(body),
    connection: "close",
  });
  res.end(body);
}

/**
 * The method and target of the request line Node could not take all of, as far as they can be
 * read from the bytes it kept (`rawPacket`); empty where they cannot.
 */
function requestLineOf(err: NodeJS.ErrnoException): { method: string; target: string } {
  const packet = (err as { rawPacket?: unknown }).rawPacket;
  const line = Buffer.isBuffer(packet) ? packet.subarray(0, 8 * 1024).toString("latin1") : "";
  const read = /^([!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}) (\S{1,8192}) HTTP\/\d\.\d\r?\n/.exec(line);
  if (read) return { method: read[1]!, target: read[2]! };
  // A line that is no request line (TLS sent to this plain port, a version Node does not know)
  // still shows its first two words, so the log says what came rather than nothing.
  const [method = "", target = ""] = line.split(/\r?\n/, 1)[0]!.split(" ", 2);
  return { method: escapedBytes(method, 64), target: escapedBytes(target, 256) };
}

/**
 * `text` (bytes read as latin1) with every byte outside printable ASCII as `\xNN`, cut to at most
 * `max` characters (then ending in `...`): what a client sent can neither drive the terminal of
 * serve's log nor fill it.
 */
function escapedBytes(text: string, max: number): string {
  let shown = "";
  for (const char of text) {
    const code = char.charCodeAt(0);
    const part = code > 0x20 && code < 0x7f ? char : `\\x${code.toString(16).padStart(2, "0")}`;
    if (shown.length + part.length > max) return `${shown}...`;
    shown += part;
  }
  return shown;
}

function plainResponse(
  requestId: string,
  status: number,
  reason: string,
  text: string,
  headers: Record<string, string> = {},
): string {
  const body = `${text}\n`;
  const lines = [
    `HTTP/1.1 ${status} ${reason}`,
    "content-type: text/plain; charset=utf-8",
    `content-length: ${Buffer.byteLength(body)}`,
    "connection: close",
    // Every answer carries a request id, these too (a client quotes it in a report).
    `x-request-id: ${requestId}`,
    ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
  ];
  return `${lines.join("\r\n")}\r\n\r\n${body}`;
}
