import type { Statement } from "better-sqlite3";
import type { NewSession, OwnerSessionRow, SessionsRepository } from "../sessions.js";
import type { DB } from "./db.js";
import { immediateTransactions } from "./immediate.js";

export class SqliteSessions implements SessionsRepository {
  private readonly insertLink: Statement;
  private readonly deleteUnusedLinks: Statement;
  private readonly unusedLink: Statement;
  private readonly spendLink: Statement;
  private readonly deleteExpired: Statement;
  private readonly insertSession: Statement;
  private readonly sessionByHash: Statement;
  private readonly removeSession: Statement;
  private readonly immediate: <T>(fn: () => T) => T;

  constructor(db: DB) {
    this.immediate = immediateTransactions(db);
    this.insertLink = db.prepare(
      "INSERT INTO owner_links (token_hash, account_id, created_at) VALUES (?, ?, ?)",
    );
    this.deleteUnusedLinks = db.prepare("DELETE FROM owner_links WHERE used_at IS NULL");
    this.unusedLink = db.prepare(
      "SELECT account_id FROM owner_links WHERE token_hash = ? AND used_at IS NULL",
    );
    this.spendLink = db.prepare("UPDATE owner_links SET used_at = ? WHERE token_hash = ?");
    this.deleteExpired = db.prepare("DELETE FROM sessions WHERE expires_at <= ?");
    this.insertSession = db.prepare(
      "INSERT INTO sessions (token_hash, account_id, csrf_token, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
    );
    this.sessionByHash = db.prepare(
      "SELECT account_id, expires_at FROM sessions WHERE token_hash = ?",
    );
    this.removeSession = db.prepare("DELETE FROM sessions WHERE token_hash = ?");
  }

  async createOwnerLink(tokenHash: string, accountId: string, now: number): Promise<void> {
    this.insertLink.run(tokenHash, accountId, now);
  }

  async forgetUnusedOwnerLinks(): Promise<void> {
    this.deleteUnusedLinks.run();
  }

  async redeemOwnerLink(
    linkHash: string,
    session: NewSession,
    now: number,
  ): Promise<string | undefined> {
    return this.immediate(() => {
      const link = this.unusedLink.get(linkHash) as { account_id: string } | undefined;
      if (!link) return undefined;
      this.spendLink.run(now, linkHash);
      this.deleteExpired.run(now);
      this.insertSession.run(
        session.tokenHash,
        link.account_id,
        session.csrfTokenHash,
        now,
        session.expiresAt,
      );
      return link.account_id;
    });
  }

  async findSession(tokenHash: string): Promise<OwnerSessionRow | undefined> {
    return this.sessionByHash.get(tokenHash) as OwnerSessionRow | undefined;
  }

  async deleteSession(tokenHash: string): Promise<void> {
    this.removeSession.run(tokenHash);
  }
}
