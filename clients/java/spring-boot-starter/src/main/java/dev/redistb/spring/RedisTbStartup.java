package dev.redistb.spring;

import dev.redistb.StartupException;
import java.io.PrintStream;
import org.springframework.boot.SpringApplication;
import org.springframework.context.ConfigurableApplicationContext;

/**
 * SPEC U4 for an application's {@code main}: runs it, and when a limiter cannot start (U1-U3)
 * prints that one line on standard error and exits with status 3 (what uvicorn and gunicorn give a
 * failed start), with no stack trace. Spring Boot's own report of the failure is left to the
 * logging configuration: {@link StartupFailureAnalyzer} makes it the line, and {@code
 * logging.level.org.springframework.boot.diagnostics.LoggingFailureAnalysisReporter=off} silences
 * it.
 *
 * <pre>{@code
 * public static void main(String[] args) {
 *   RedisTbStartup.run(MyApplication.class, args);
 * }
 * }</pre>
 */
public final class RedisTbStartup {
  /** SPEC U4: the exit status of a failed start. */
  public static final int EXIT_STATUS = 3;

  private RedisTbStartup() {}

  /** {@link SpringApplication#run}, or the failed start's line and exit status 3. */
  public static ConfigurableApplicationContext run(Class<?> application, String... args) {
    try {
      return SpringApplication.run(application, args);
    } catch (RuntimeException e) {
      StartupException cause = startupCause(e);
      if (cause == null) {
        throw e;
      }
      exit(System.err, cause);
      return null; // not reached
    }
  }

  /** The limiter's startup failure behind {@code e}, or null. */
  public static StartupException startupCause(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
      if (t instanceof StartupException s) {
        return s;
      }
    }
    return null;
  }

  private static void exit(PrintStream err, StartupException cause) {
    err.println(cause.getMessage());
    err.flush();
    System.exit(EXIT_STATUS);
  }
}
