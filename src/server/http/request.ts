import type { IncomingMessage, ServerResponse } from "node:http";
import { BlockList, isIPv4, isIPv6 } from "node:net";
import type { Context } from "hono";
import { type RequestTrace, traceOf } from "./request-trace.js";

/**
 * What a handler reads of its request besides the body. The app runs on the Node server, which
 * passes the Node request and response as the env (`@hono/node-server`); off it (Hono's
 * `app.request` in tests) both are undefined and these read Hono's own objects.
 */
interface NodeBindings {
  incoming?: IncomingMessage;
  outgoing?: ServerResponse;
}

export function nodeIncoming(c: Context): IncomingMessage | undefined {
  return (c.env as NodeBindings | undefined)?.incoming;
}

export function nodeOutgoing(c: Context): ServerResponse | undefined {
  return (c.env as NodeBindings | undefined)?.outgoing;
}

/**
 * A request header (`name` in lower case), repeated values joined. Read from Node's own parsed
 * header object: `c.req.header()` builds a web Headers object from every header on its first
 * call, which costs more on the request path than everything else the registration does.
 */
export function requestHeader(c: Context, name: string): string | undefined {
  const incoming = nodeIncoming(c);
  if (!incoming) return c.req.header(name);
  const value = incoming.headers[name];
  return Array.isArray(value) ? value.join(", ") : value;
}

/** How a request's client and origin are read (`ServerOptions` carries both). */
export interface ForwardingOptions {
  /**
   * The proxies in front of the gateway (`ProxyList`): only their X-Forwarded-For/Proto/Host are
   * believed, a client must not choose its own address or origin.
   */
  trustedProxies?: AddressSet;
  /** The origin of the configured public URL, which URLs handed out use when it is set. */
  publicUrlOrigin?: string;
}

/**
 * One spelling per address, so a proxy listed as `127.0.0.1` matches a socket that reports
 * `::ffff:127.0.0.1`. Undefined for what is not an IP address.
 */
export function canonicalAddress(raw: string): string | undefined {
  const address = raw.trim();
  if (isIPv4(address)) return address;
  const bare = address.startsWith("[") && address.endsWith("]") ? address.slice(1, -1) : address;
  if (!isIPv6(bare)) return undefined;
  // The URL parser writes IPv6 in its shortest lower-case form; a zone id it cannot parse.
  const url = `http://[${bare}]`;
  const host = URL.canParse(url) ? new URL(url).hostname.slice(1, -1) : bare.toLowerCase();
  const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(host);
  if (!mapped) return host;
  const high = Number.parseInt(mapped[1]!, 16);
  const low = Number.parseInt(mapped[2]!, 16);
  return [high >> 8, high & 255, low >> 8, low & 255].join(".");
}

/** An X-Forwarded-For entry's address: proxies may add a port (`1.2.3.4:5678`, `[::1]:80`). */
function forwardedAddress(entry: string): string {
  const withPort = /^\[([^\]]+)\](?::\d+)?$|^(\d+\.\d+\.\d+\.\d+):\d+$/.exec(entry);
  const address = withPort ? (withPort[1] ?? withPort[2]!) : entry;
  return canonicalAddress(address) ?? entry;
}

/** Canonical addresses (`canonicalAddress`): a Set of them, or a `ProxyList`. */
export interface AddressSet {
  readonly size: number;
  has(address: string): boolean;
}

/**
 * Addresses and CIDR ranges (`10.0.0.0/8`, `fd00::/8`), as a load balancer's pool is often
 * given. Throws a list of the entries that are neither.
 */
export class ProxyList implements AddressSet {
  private readonly exact = new Set<string>();
  private readonly ranges = new BlockList();
  private rangeCount = 0;

  constructor(entries: readonly string[]) {
    const wrong: string[] = [];
    for (const entry of entries) {
      const [raw, bits, extra] = entry.trim().split("/");
      const address = canonicalAddress(raw ?? "");
      if (address === undefined || extra !== undefined) {
        wrong.push(entry);
      } else if (bits === undefined) {
        this.exact.add(address);
      } else {
        const family = isIPv4(address) ? "ipv4" : "ipv6";
        const prefix = /^\d{1,3}$/.test(bits) ? Number(bits) : Number.NaN;
        if (!(prefix >= 0 && prefix <= (family === "ipv4" ? 32 : 128))) wrong.push(entry);
        else {
          this.ranges.addSubnet(address, prefix, family);
          this.rangeCount++;
        }
      }
    }
    if (wrong.length > 0) throw new InvalidProxies(wrong);
  }

  get size(): number {
    return this.exact.size + this.rangeCount;
  }

  has(address: string): boolean {
    if (this.exact.has(address)) return true;
    return this.rangeCount > 0 && this.ranges.check(address, isIPv4(address) ? "ipv4" : "ipv6");
  }
}

/** Trusted-proxy entries that are neither an address nor a CIDR range. */
export class InvalidProxies extends Error {
  constructor(readonly entries: string[]) {
    super(`not an IP address or CIDR range: ${entries.join(", ")}`);
  }
}

/** The socket's peer when it is a trusted proxy, else undefined. */
function trustedPeer(c: Context, trusted: AddressSet | undefined): string | undefined {
  if (!trusted || trusted.size === 0) return undefined;
  const peer = nodeIncoming(c)?.socket?.remoteAddress;
  const address = peer === undefined ? undefined : canonicalAddress(peer);
  return address !== undefined && trusted.has(address) ? address : undefined;
}

/**
 * The client's address. Behind trusted proxies it is the right-most X-Forwarded-For entry that
 * is not one of them: entries to its left were written by the client itself.
 */
export function clientIp(c: Context, trusted?: AddressSet): string {
  const peer = trustedPeer(c, trusted);
  if (peer === undefined) return nodeIncoming(c)?.socket?.remoteAddress ?? "unknown";
  const chain = (requestHeader(c, "x-forwarded-for") ?? "")
    .split(",")
    .map((entry) => entry.trim())
    .filter((entry) => entry !== "");
  for (let index = chain.length - 1; index >= 0; index--) {
    const address = forwardedAddress(chain[index]!);
    if (!trusted!.has(address)) return address;
  }
  return peer;
}

/** The first of a header's comma-separated values: what the proxy nearest the client saw. */
function firstValue(header: string | undefined): string | undefined {
  const value = header?.split(",")[0]?.trim();
  return value === "" ? undefined : value;
}

/**
 * The origin the client reached the gateway at: the request's own, or, from a trusted proxy,
 * the one its X-Forwarded-Proto and X-Forwarded-Host name. Decides the session cookie's
 * `Secure` and URLs handed out; never same-origin checks (`ownOrigin`).
 */
function externalOrigin(c: Context, options: ForwardingOptions): string {
  const own = new URL(c.req.url);
  if (trustedPeer(c, options.trustedProxies) === undefined) return own.origin;
  const proto = firstValue(requestHeader(c, "x-forwarded-proto"))?.toLowerCase();
  const protocol = proto === "http" || proto === "https" ? `${proto}:` : own.protocol;
  const host = firstValue(requestHeader(c, "x-forwarded-host")) ?? own.host;
  // A header that is more than host[:port] (a path, credentials) names no origin.
  const candidate = `${protocol}//${host}`;
  const named = /[\s/\\@?#]/.test(host) || !URL.canParse(candidate) ? undefined : candidate;
  return new URL(named ?? `${protocol}//${own.host}`).origin;
}

/** Whether the client reached the gateway over TLS (a cookie it gets is then `Secure`). */
export function reachedOverTls(c: Context, options: ForwardingOptions): boolean {
  return externalOrigin(c, options).startsWith("https:");
}

/** The request's trace while someone listens (`http/request-trace.ts`), else undefined. */
export function requestTrace(c: Context): RequestTrace | undefined {
  return traceOf(nodeIncoming(c));
}

/** An absolute URL on this gateway: on the configured public URL, else as the client reached it. */
export function gatewayUrl(c: Context, options: ForwardingOptions, path: string): string {
  return `${options.publicUrlOrigin ?? externalOrigin(c, options)}${path}`;
}

/**
 * The origin this gateway's own pages are served from: the configured public URL or the
 * listening address. Not the request's Host header, which any page can make a browser send
 * (DNS rebinding).
 */
export function ownOrigin(publicOrigin: string | undefined, c: Context): string {
  return publicOrigin ?? new URL(c.req.url).origin;
}
