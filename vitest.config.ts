import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    testTimeout: 20_000,
    hookTimeout: 30_000,
    pool: "forks",
    // The BYOK sealing key in the key file beside each test database, whether or not the machine
    // has a keychain (CI runs in one): tests of the keychain set their own.
    env: { GATEWAY_SECRET_KEY_STORE: "file" },
    // One throwaway PostgreSQL server for the run; the Postgres tests make their databases on it.
    // One headless Chromium for the browser tests, started before the busy part of the run.
    globalSetup: ["test/support/postgres-global.ts", "test/support/chromium-global.ts"],
    projects: [
      {
        extends: true,
        test: { name: "gateway", include: ["src/**/*.test.ts", "test/**/*.test.ts"] },
      },
      {
        // The client libraries once more, through a gateway on Postgres (test/support/tool-loop.ts).
        extends: true,
        test: {
          name: "clients on postgres",
          include: ["test/clients/**/*.test.ts"],
          env: { GATEWAY_SECRET_KEY_STORE: "file", GATEWAY_TEST_BACKEND: "postgres" },
        },
      },
    ],
  },
});
