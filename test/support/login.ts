import { GatewayClient } from "../../src/cli/api-client.js";
import type { CredentialStores } from "../../src/cli/credentials/index.js";
import type { CredentialStore, StoredLogin } from "../../src/cli/credentials/types.js";
import type { LoginContext } from "../../src/cli/login.js";
import type { TextOutput } from "../../src/cli/output.js";
import type { KeychainApi } from "../../src/store/os-keychain.js";

/**
 * `gateway login` driven in-process through its LoginContext: a captured terminal, a browser
 * that plays the owner over real HTTP, credential stores and a keychain as fakes.
 */

/** A terminal stream that keeps what was written (not a TTY: no colour, no spinner frames). */
export function capturedOutput(): TextOutput & { text(): string } {
  let text = "";
  return {
    write(chunk: string) {
      text += chunk;
      return true;
    },
    text: () => text,
  };
}

/** A credential store in memory. */
export class MemoryStore implements CredentialStore {
  readonly kind = "file" as const;
  readonly location = "memory";
  readonly saved = new Map<string, StoredLogin>();
  async get(profile: string) {
    return this.saved.get(profile);
  }
  async set(profile: string, login: StoredLogin) {
    this.saved.set(profile, login);
  }
  async delete(profile: string) {
    return this.saved.delete(profile);
  }
}

export function memoryStores(): { store: MemoryStore; stores: CredentialStores } {
  const store = new MemoryStore();
  return { store, stores: { primary: store, all: [store] } };
}

/**
 * An OS keychain in memory, as the keyring binding's loader. `hangs(account)` makes that entry's
 * calls never answer, as a Secret Service waiting on an unlock prompt does.
 */
export function fakeKeychain(hangs: (account: string) => boolean = () => false) {
  const secrets = new Map<string, string>();
  const never = new Promise<never>(() => {});
  const api: KeychainApi = {
    entry: (service, account) => {
      const id = `${service}/${account}`;
      const answer = <T>(value: () => T): Promise<T> =>
        hangs(account) ? never : Promise.resolve().then(value);
      return {
        getPassword: () => answer(() => secrets.get(id) ?? null),
        setPassword: (password) => answer(() => void secrets.set(id, password)),
        deletePassword: () => answer(() => secrets.delete(id)),
      };
    },
  };
  return {
    load: async () => api,
    read: (service: string, account: string) => secrets.get(`${service}/${account}`),
  };
}

export interface BrowserVisit {
  url: string;
  status: number;
  html: string;
}

/**
 * A browser: follows redirects, keeps cookies (starting from `cookie`, an owner's session, if
 * given) and on the approval page presses `press`, if it got there.
 */
export function fakeBrowser(options: { cookie?: string; press?: "approve" | "deny" } = {}) {
  const visits: BrowserVisit[] = [];
  let cookie = options.cookie ?? "";
  const get = async (url: string): Promise<BrowserVisit> => {
    for (;;) {
      const res = await fetch(url, { redirect: "manual", headers: cookie ? { cookie } : {} });
      const set = res.headers.get("set-cookie");
      if (set?.startsWith("gateway_session=")) cookie = set.split(";")[0];
      if (res.status === 303) {
        visits.push({ url, status: 303, html: "" });
        url = new URL(res.headers.get("location")!, url).toString();
        continue;
      }
      const visit = { url, status: res.status, html: await res.text() };
      visits.push(visit);
      return visit;
    }
  };
  return {
    visits,
    /** The code the approval page showed, if the browser saw one. */
    shownCode: () =>
      visits.map((v) => /id="user-code">([^<]+)</.exec(v.html)?.[1]).find((code) => code),
    async open(url: string): Promise<void> {
      const page = await get(url);
      const csrf = /name="csrf_token" value="([^"]+)"/.exec(page.html)?.[1];
      const userCode = /name="user_code" value="([^"]+)"/.exec(page.html)?.[1];
      if (!options.press || !csrf || !userCode) return;
      const res = await fetch(new URL(`/dashboard/device/${options.press}`, url), {
        method: "POST",
        headers: {
          cookie,
          origin: new URL(url).origin,
          "content-type": "application/x-www-form-urlencoded",
        },
        body: new URLSearchParams({ user_code: userCode, csrf_token: csrf }).toString(),
      });
      visits.push({ url: res.url, status: res.status, html: await res.text() });
    },
  };
}

/** A login context against `baseUrl`, with a captured terminal; `parts` replace the defaults. */
export function loginContext(baseUrl: string, parts: Partial<LoginContext> = {}) {
  const stdout = capturedOutput();
  const stderr = capturedOutput();
  const interrupts = new Set<() => void>();
  const ctx: LoginContext = {
    client: new GatewayClient({ baseUrl }),
    stores: memoryStores().stores,
    openBrowser: async () => undefined,
    // Nothing to wait for unless a test brings its clock.
    sleep: async () => undefined,
    now: Date.now,
    clientName: "login test",
    stdout,
    stderr,
    env: {},
    onInterrupt: (handler) => {
      interrupts.add(handler);
      return () => interrupts.delete(handler);
    },
    ...parts,
  };
  return {
    ctx,
    stdout,
    stderr,
    /** Ctrl-C, as the terminal would send it; false when nothing listens. */
    interrupt: () => {
      for (const handler of interrupts) handler();
      return interrupts.size > 0;
    },
    listeningForInterrupt: () => interrupts.size > 0,
  };
}
