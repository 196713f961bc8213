import { afterEach, describe, expect, it, vi } from "vitest";
import { malformedHost, ordinaryHost, parsedAsItself } from "./host.js";

afterEach(() => {
  vi.unstubAllGlobals();
});

describe("malformedHost", () => {
  it("tells an ordinary Host, in any case and with any port up to 65535, without making a URL", () => {
    vi.stubGlobal(
      "URL",
      class {
        constructor() {
          throw new Error("a URL was made");
        }
        static canParse(): boolean {
          throw new Error("a URL was parsed");
        }
      },
    );
    for (const host of [
      "127.0.0.1:8787",
      "127.0.0.1",
      "localhost:1",
      "LOCALHOST:65000",
      "Gateway.Example.COM:65535",
      "gw.internal.:443",
      "a_b-c:8080",
      "255.255.255.255:0",
    ])
      expect({ host, malformed: malformedHost(host) }).toEqual({ host, malformed: false });
  });

  it.each([
    ["[::1]:8787", false],
    ["[::1]", false],
    ["[FE80::1]:60000", false],
    ["xn--bcher-kva.example:9000", false],
    ["bad host", true],
    ["a@b", true],
    ["ex%41mple:8080", true],
    ["x:99999", true],
    ["x:65536", true],
    ["h:", true],
    [":80", true],
    ["a:b:c", true],
    ["[zz]", true],
    ["[::1", true],
    ["é", true],
    // The adapter would take these as they come, lower case with a port of 1000 to 59999, and a
    // route making a URL of the request would fail on them.
    ["xn--", true],
    ["xn--:8080", true],
    ["1.2.3.999:8080", true],
    // An address the URL spells otherwise is not the Host, as the adapter rules when it parses.
    ["127.1:8080", true],
    ["0x7f.0.0.1", true],
    ["[0:0::1]:8787", true],
  ])("%s: malformed %s", (host, malformed) => {
    expect(malformedHost(host)).toBe(malformed);
  });

  it("takes as ordinary only what the adapter's parse takes as itself", () => {
    // Every Host of up to four characters from the alphabet that matters, and longer ones built
    // from the pieces a Host is made of.
    const alphabet = ["a", "A", "0", "1", "9", "x", "n", "-", "_", ".", ":", "f"];
    const pieces = ["xn--", "0x", "255", "256", "1.", "a.", ":65535", ":65536", ":0", "..", "-"];
    const hosts = new Set<string>();
    const grow = (prefix: string, depth: number, from: readonly string[]) => {
      if (prefix !== "") hosts.add(prefix);
      if (depth === 0) return;
      for (const next of from) grow(prefix + next, depth - 1, from);
    };
    grow("", 4, alphabet);
    grow("", 3, [...pieces, "b", "7"]);
    const wrong = [...hosts].filter((host) => ordinaryHost(host) && !parsedAsItself(host));
    expect(wrong).toEqual([]);
    // The fast path is not a refusal of everything else: it takes the usual Hosts.
    expect([...hosts].filter(ordinaryHost).length).toBeGreaterThan(1000);
  });
});
