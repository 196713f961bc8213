/**
 * Whether a request's Host header cannot name this gateway: what @hono/node-server refuses as an
 * invalid host when it makes a URL of one (no URL can be made of it, or the URL's host is not the
 * header's: a user part, a percent escape, an address the URL spells otherwise), for every Host,
 * whatever its case or port. The adapter itself takes a lower-case name with a port of 1000 to
 * 59999 as it comes, unchecked, so a Host such as `xn--` or `1.2.3.999` reached the routes and
 * failed there as a 500 wherever a URL was made of the request; here it is refused like any other.
 *
 * An ordinary Host (a name, or an IPv4 address in dotted decimal, in any case, with or without a
 * port up to 65535) is told from its characters alone, with no URL made; anything else (an IPv6
 * literal, a name the URL rewrites) is parsed, as the adapter parses it.
 */
export function malformedHost(host: string): boolean {
  return !ordinaryHost(host) && !parsedAsItself(host);
}

/**
 * A name whose labels the URL parser keeps as they are (lower-cased): letters, digits, `_` and
 * `-`, no `xn--` label (punycode, which it decodes and may refuse), and a last label that is no
 * number (`.1`, `.0x1f`: the parser then reads the whole name as an IPv4 address).
 */
const plainName =
  /^(?!(?:.*\.)?xn--)(?:[a-z0-9_-]+\.)*(?![0-9]+\.?$|0x[0-9a-f]*\.?$)[a-z0-9_-]+\.?$/i;

/** An IPv4 address as the URL parser writes it: four decimal parts 0-255, no leading zero. */
const dottedQuad =
  /^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;

/** A Host the URL parser takes as it is, told without making a URL. */
export function ordinaryHost(host: string): boolean {
  const colon = host.lastIndexOf(":");
  const name = colon === -1 ? host : host.slice(0, colon);
  if (colon !== -1) {
    const port = host.slice(colon + 1);
    if (!/^\d{1,5}$/.test(port) || Number(port) > 65_535) return false;
  }
  return plainName.test(name) || dottedQuad.test(name);
}

/**
 * The adapter's own test of a Host it parses (`buildUrl` in @hono/node-server): a URL can be made
 * of it, and its host is the header's, in lower case, without its port.
 */
export function parsedAsItself(host: string): boolean {
  const url = `http://${host}/`;
  if (!URL.canParse(url)) return false;
  const { hostname } = new URL(url);
  const name = host.includes(":") ? host.replace(/:\d+$/, "") : host;
  return hostname.length === host.length || hostname === name.toLowerCase();
}
