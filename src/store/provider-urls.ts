import { providerUrlContext, type SecretBox } from "./secret-box.js";
import { shownUrl } from "./secrets.js";

/**
 * How a provider row keeps its base URL. A URL that carries something `shownUrl` hides (a user
 * and password, a query string such as Gemini's `?key=`, a fragment, a gateway key) is sealed
 * whole, as BYOK keys are, and opened into memory only. The whole query is sealed rather than the
 * parameters of a list of credential names: a name the list missed would stay in plain text, and
 * an `api-version` sealed with the rest costs nothing, as the URL is opened whole. Such a row has
 * no plain `base_url`, so a gateway from before these columns reads none and sends nothing (its
 * calls fail as `upstream_error`) rather than a URL without its credential.
 */
export interface BaseUrlColumns {
  /** The URL, when it carries nothing to hide; else null. */
  base_url: string | null;
  /** The whole URL sealed for the provider's row, when it carries something to hide. */
  base_url_sealed: string | null;
  /** What may be shown of the URL (`shownUrl`), for whoever reads the table. */
  base_url_shown: string | null;
}

/** The columns for `url`, sealed afresh. */
export function sealedBaseUrl(
  providerId: string,
  url: string | null,
  box: SecretBox,
): BaseUrlColumns {
  if (url === null) return { base_url: null, base_url_sealed: null, base_url_shown: null };
  const shown = shownUrl(url);
  if (shown === url) return { base_url: url, base_url_sealed: null, base_url_shown: url };
  return {
    base_url: null,
    base_url_sealed: box.seal(url, providerUrlContext(providerId)),
    base_url_shown: shown,
  };
}

/**
 * The URL a row holds: its plain `base_url` when it has one (an older gateway that applied its
 * config wrote the URL there, over what the sealed column says), else the sealed one opened.
 * Undefined when that does not open (start-up checked the key, so the row was altered).
 */
export function openedBaseUrl(
  row: { id: string } & BaseUrlColumns,
  box: SecretBox,
): string | null | undefined {
  if (row.base_url !== null) return row.base_url;
  if (row.base_url_sealed === null) return null;
  return box.open(row.base_url_sealed, providerUrlContext(row.id));
}

/**
 * Whether a row with a plain `base_url` is not in the form `sealedBaseUrl` gives: written before
 * these columns, or by an older gateway since. Such a row is sealed at the next start.
 */
export function holdsPlainBaseUrl(row: BaseUrlColumns): boolean {
  if (row.base_url === null) return false;
  return (
    row.base_url_sealed !== null ||
    row.base_url_shown !== row.base_url ||
    shownUrl(row.base_url) !== row.base_url
  );
}
