package dev.redistb.example;

import dev.redistb.RequestView;
import java.util.Map;

/** A stand-in for authentication: an API key names a user and a plan; none is anonymous. */
final class Accounts {
  record Account(String user, String plan) {}

  static final String HEADER = "x-api-key";

  private static final Map<String, Account> KEYS =
      Map.of("key-alice", new Account("alice", "pro"), "key-bob", new Account("bob", "free"));

  private Accounts() {}

  static Account of(RequestView req) {
    String key = req.firstHeader(HEADER);
    return key == null ? null : KEYS.get(key);
  }

  /** The key function of the per-user policies: null (skipped) when anonymous. */
  static String user(RequestView req) {
    Account a = of(req);
    return a == null ? null : a.user();
  }

  static String plan(RequestView req) {
    Account a = of(req);
    return a == null ? null : a.plan();
  }
}
