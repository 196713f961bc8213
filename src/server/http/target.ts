/** RFC 9112's absolute form of a request target, as a client sends it to a proxy. */
const absoluteForm = /^https?:\/\//i;

/**
 * The path of a request target as Node hands it over (`incoming.url`), without its query: the
 * origin form's path, or the path of an absolute form (`http://host/path`, RFC 9112). A target
 * that is neither is itself, so a line in serve's log shows what was sent.
 */
export function targetPath(target: string): string {
  const query = target.indexOf("?");
  const path = query === -1 ? target : target.slice(0, query);
  if (path.startsWith("/") || !absoluteForm.test(target) || !URL.canParse(target)) return path;
  return new URL(target).pathname;
}

/**
 * Why the gateway cannot read a request target, or undefined when it can: the origin form
 * (`/v1/models`) with no backslash in its path, or an absolute http(s) URL (RFC 9112's absolute
 * form). `*` (OPTIONS) is the caller's to answer.
 */
export function unreadableTarget(target: string): string | undefined {
  const query = target.indexOf("?");
  const path = query === -1 ? target : target.slice(0, query);
  if (path.includes("\\")) return "a backslash in its path";
  if (path.startsWith("/")) return undefined;
  if (!absoluteForm.test(target)) return "neither a path nor an http:// URL";
  if (!URL.canParse(target)) return "a URL that does not parse";
  return undefined;
}
