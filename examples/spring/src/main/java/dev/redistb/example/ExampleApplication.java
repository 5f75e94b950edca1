package dev.redistb.example;

import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;

/**
 * An API rate-limited with redis-tb's Spring Boot starter: the demo every example implements
 * (examples/manifest.json). The policies are {@link Policies}'s beans plus {@code
 * redis-tb.policies} in application.properties; the routes are {@link ApiController}'s.
 */
@SpringBootApplication
public class ExampleApplication {
  public static void main(String[] args) {
    SpringApplication.run(ExampleApplication.class, args);
  }
}
