import { readFileSync } from "node:fs";

/**
 * The package's version, read from package.json (one directory above both src/ and dist/), so a
 * release changes it in one place: `gateway --version` and the MCP server's handshake print it.
 */
export const packageVersion: string = (
  JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
    version: string;
  }
).version;
