package dev.redistb.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import dev.redistb.testing.Circles;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** The starter's classes, read by jdeps: no circle among them. */
class LayersTest {
  @Test
  void no_class_circle_in_the_starter() {
    Map<String, Set<String>> g = Circles.graph(Path.of("target/classes"), "dev.redistb.spring.");
    assertFalse(g.isEmpty(), "nothing read");
    assertEquals(List.of(), Circles.of(g));
  }
}
