import type pg from "pg";

/** A pool or one connection of it: where a statement that is part of a transaction runs. */
export type Queryable = pg.Pool | pg.PoolClient;

/**
 * BEGIN ... COMMIT around `work` on one connection of the pool; anything it throws rolls the
 * transaction back and is thrown on. Every repository method that writes more than one statement
 * goes through here, so each one is one transaction, as on SQLite.
 */
export async function inTransaction<T>(
  pool: pg.Pool,
  work: (client: pg.PoolClient) => Promise<T>,
): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query("BEGIN");
    const result = await work(client);
    await client.query("COMMIT");
    return result;
  } catch (err) {
    // A connection that cannot even roll back is closed rather than handed to the next caller.
    await client.query("ROLLBACK").catch((rollbackErr: Error) => {
      broken = rollbackErr;
    });
    throw err;
  } finally {
    client.release(broken);
  }
}

/**
 * Transaction-scoped advisory locks, one class per kind of check-then-write that two gateways
 * could otherwise interleave (a count and the insert it allows). The second key narrows the lock
 * to what is counted (`hashtext` of an account, say); a shared hash only serializes a little more.
 */
const lockClass = {
  jobSubmissions: 718_201,
  deviceCodes: 718_202,
  configApply: 718_203,
  nativeResponseId: 718_204,
} as const;

export async function lockFor(
  client: pg.PoolClient,
  kind: keyof typeof lockClass,
  what = "",
): Promise<void> {
  await client.query({
    name: "gateway_xact_lock",
    text: "SELECT pg_advisory_xact_lock($1, hashtext($2))",
    values: [lockClass[kind], what],
  });
}
