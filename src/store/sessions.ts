export interface OwnerSessionRow {
  account_id: string;
  expires_at: number;
}

export interface NewSession {
  tokenHash: string;
  csrfTokenHash: string;
  expiresAt: number;
}

/**
 * The owner's one-time links and the dashboard sessions they open. Tokens, session ids and CSRF
 * tokens are stored only as hashes.
 */
export interface SessionsRepository {
  createOwnerLink(tokenHash: string, accountId: string, now: number): Promise<void>;
  /** Links not yet opened stop working. */
  forgetUnusedOwnerLinks(): Promise<void>;
  /**
   * Spends an unused owner link and opens `session` for its account, in one transaction (expired
   * sessions are dropped on the way); the account, or undefined when the link is unknown or spent.
   */
  redeemOwnerLink(linkHash: string, session: NewSession, now: number): Promise<string | undefined>;
  findSession(tokenHash: string): Promise<OwnerSessionRow | undefined>;
  /** Signs a session out: its cookie opens nothing any more. */
  deleteSession(tokenHash: string): Promise<void>;
}
