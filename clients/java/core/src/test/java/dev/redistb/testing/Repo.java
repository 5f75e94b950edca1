package dev.redistb.testing;

import java.nio.file.Files;
import java.nio.file.Path;

/** The repository's root, found from the working directory (the folder holding clients/SPEC.md). */
public final class Repo {
  private Repo() {}

  public static Path root() {
    Path p = Path.of("").toAbsolutePath();
    while (p != null) {
      if (Files.isRegularFile(p.resolve("clients/SPEC.md"))) {
        return p;
      }
      p = p.getParent();
    }
    throw new IllegalStateException(
        "clients/SPEC.md not found above " + Path.of("").toAbsolutePath());
  }

  /** The module, built by {@code cargo build --release} (or REDIS_TB_MODULE). */
  public static Path module() {
    String env = System.getenv("REDIS_TB_MODULE");
    Path m =
        env != null && !env.isEmpty()
            ? Path.of(env)
            : root().resolve("target/release/libredis_tb.so");
    if (!Files.isRegularFile(m)) {
      throw new IllegalStateException(
          m + " is missing: build it with `cargo build --release` (make build)");
    }
    return m;
  }
}
