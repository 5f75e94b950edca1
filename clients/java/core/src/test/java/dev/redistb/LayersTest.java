package dev.redistb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.redistb.testing.Circles;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * The core's structure, read from its compiled classes (jdeps): dev.redistb.store (the typed client
 * and the Store seam) names nothing of the limiter above it, and no class circle but the limit
 * types' (AnyLimit is sealed: it names the three records that implement it, and Limit's factories
 * return the other two, as SPEC "Names" has it: Limit.window, Limit.inFlight).
 */
class LayersTest {
  private static final Path CLASSES = Path.of("target/classes");

  @Test
  void the_store_package_names_nothing_above_it() {
    Map<String, Set<String>> g = Circles.graph(CLASSES, "dev.redistb.");
    g.forEach(
        (from, tos) -> {
          if (from.startsWith("dev.redistb.store.")) {
            for (String to : tos) {
              assertTrue(to.startsWith("dev.redistb.store."), from + " names " + to);
            }
          }
        });
    assertTrue(g.keySet().stream().anyMatch(c -> c.startsWith("dev.redistb.store.")), "read");
  }

  @Test
  void no_class_circle_but_the_sealed_limit_types() {
    List<Set<String>> circles = Circles.of(Circles.graph(CLASSES, "dev.redistb."));
    assertEquals(
        List.of(
            Set.of(
                "dev.redistb.AnyLimit",
                "dev.redistb.InFlightLimit",
                "dev.redistb.Limit",
                "dev.redistb.WindowLimit")),
        circles);
  }
}
