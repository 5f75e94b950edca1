package dev.redistb.spring;

import dev.redistb.LimiterMetrics;
import dev.redistb.Policy;
import dev.redistb.RateLimiter;
import dev.redistb.lettuce.LettuceStore;
import dev.redistb.store.Store;
import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.TimeoutOptions;
import io.micrometer.core.instrument.MeterRegistry;
import java.net.URI;
import java.time.Duration;
import java.util.List;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.autoconfigure.condition.ConditionalOnWebApplication;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.ApplicationContext;
import org.springframework.context.SmartLifecycle;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.Ordered;
import org.springframework.web.method.support.HandlerMethodArgumentResolver;
import org.springframework.web.reactive.config.WebFluxConfigurer;
import org.springframework.web.reactive.result.method.annotation.ArgumentResolverConfigurer;
import org.springframework.web.servlet.config.annotation.WebMvcConfigurer;

/**
 * redis-tb from {@code redis-tb.*}: the store (Lettuce, or Jedis), the limiters (the main one from
 * properties and Policy beans, one per {@link RateLimit} method), the servlet filter or the WebFlux
 * WebFilter, the aspect, Micrometer metrics, and the strict startup check (SPEC U: no module, no
 * permission or an unreachable Redis stops the start in one line).
 */
@AutoConfiguration(
    afterName = {
      "org.springframework.boot.actuate.autoconfigure.metrics.CompositeMeterRegistryAutoConfiguration",
      "org.springframework.boot.actuate.autoconfigure.metrics.export.prometheus.PrometheusMetricsExportAutoConfiguration"
    })
@ConditionalOnProperty(prefix = "redis-tb", name = "enabled", matchIfMissing = true)
@EnableConfigurationProperties(RedisTbProperties.class)
public class RedisTbAutoConfiguration {

  static String server(URI uri) {
    return (uri.getHost() == null ? "127.0.0.1" : uri.getHost())
        + ":"
        + (uri.getPort() < 0 ? 6379 : uri.getPort());
  }

  /** The store on the application's Redis (a {@code Store} bean of the application wins). */
  @Bean(destroyMethod = "")
  @ConditionalOnMissingBean(Store.class)
  Store redisTbStore(RedisTbProperties props, ObjectProvider<RedisTbClients> clients) {
    URI uri = URI.create(props.getUrl());
    RedisTbClients owned = clients.getObject();
    if ("jedis".equalsIgnoreCase(props.getClient())) {
      return JedisStores.create(uri, server(uri), props.getTimeout(), owned);
    }
    RedisClient client = RedisClient.create();
    // a command made while Redis is down fails at once (no queue, no late charge)
    client.setOptions(
        ClientOptions.builder()
            .disconnectedBehavior(ClientOptions.DisconnectedBehavior.REJECT_COMMANDS)
            .timeoutOptions(TimeoutOptions.enabled(Duration.ofSeconds(2)))
            .build());
    owned.close(client::shutdown);
    RedisURI redisUri = RedisURI.create(props.getUrl());
    redisUri.setTimeout(Duration.ofSeconds(2));
    return LettuceStore.connect(client, redisUri);
  }

  @Bean(destroyMethod = "close")
  RedisTbClients redisTbClients() {
    return new RedisTbClients();
  }

  /** SPEC M: Micrometer, when it is there (the application's MeterRegistry). */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnClass(name = "io.micrometer.core.instrument.MeterRegistry")
  static class Micrometer {
    @Bean
    @ConditionalOnMissingBean(LimiterMetrics.class)
    LimiterMetrics redisTbMetrics(ObjectProvider<MeterRegistry> registry) {
      MeterRegistry r = registry.getIfAvailable();
      return r == null ? LimiterMetrics.NONE : new MicrometerLimiterMetrics(r);
    }
  }

  @Bean
  Limiters redisTbLimiters(
      RedisTbProperties props,
      Store store,
      ObjectProvider<LimiterMetrics> metrics,
      ObjectProvider<HashTag> hashTag) {
    return new Limiters(
        props, store, metrics.getIfAvailable(() -> LimiterMetrics.NONE), hashTag.getIfAvailable());
  }

  /** The main limiter: the properties' policies and the application's Policy beans. */
  @Bean
  @ConditionalOnMissingBean(RateLimiter.class)
  RateLimiter redisTbLimiter(Limiters limiters, ObjectProvider<Policy> policies) {
    List<Policy> beans = policies.orderedStream().toList();
    return limiters.main(beans);
  }

  @Bean
  static AnnotationLimiters redisTbAnnotationLimiters(ObjectProvider<Limiters> limiters) {
    return new AnnotationLimiters(limiters::getObject);
  }

  @Bean
  RateLimitAspect redisTbAspect(AnnotationLimiters limiters) {
    return new RateLimitAspect(limiters);
  }

  @Bean
  RateLimitExceptionHandler redisTbExceptionHandler() {
    return new RateLimitExceptionHandler();
  }

  /** SPEC U1-U3: before the application serves, every limiter's check. */
  @Bean
  SmartLifecycle redisTbStartup(Limiters limiters, RateLimiter main) {
    return new SmartLifecycle() {
      private volatile boolean running;

      @Override
      public void start() {
        limiters.startup();
        running = true;
      }

      @Override
      public void stop() {
        running = false;
      }

      @Override
      public boolean isRunning() {
        return running;
      }

      @Override
      public int getPhase() {
        return Integer.MIN_VALUE + 1000; // before the web server starts taking requests
      }
    };
  }

  @Configuration(proxyBeanMethods = false)
  @ConditionalOnWebApplication(type = ConditionalOnWebApplication.Type.SERVLET)
  @ConditionalOnClass(name = "jakarta.servlet.Filter")
  static class Servlet {
    @Bean
    @ConditionalOnProperty(prefix = "redis-tb", name = "filter", matchIfMissing = true)
    FilterRegistrationBean<RateLimitFilter> redisTbFilter(
        RateLimiter limiter, ApplicationContext context) {
      FilterRegistrationBean<RateLimitFilter> reg =
          new FilterRegistrationBean<>(new RateLimitFilter(limiter, new ServletRoutes(context)));
      reg.setOrder(Ordered.HIGHEST_PRECEDENCE + 100);
      reg.addUrlPatterns("/*");
      return reg;
    }

    @Bean
    WebMvcConfigurer redisTbDecisionArgument() {
      return new WebMvcConfigurer() {
        @Override
        public void addArgumentResolvers(List<HandlerMethodArgumentResolver> resolvers) {
          resolvers.add(new DecisionArgumentResolvers.Servlet());
        }
      };
    }
  }

  @Configuration(proxyBeanMethods = false)
  @ConditionalOnWebApplication(type = ConditionalOnWebApplication.Type.REACTIVE)
  static class Reactive {
    @Bean
    @ConditionalOnProperty(prefix = "redis-tb", name = "filter", matchIfMissing = true)
    RateLimitWebFilter redisTbWebFilter(RateLimiter limiter, ApplicationContext context) {
      return new RateLimitWebFilter(limiter, context);
    }

    @Bean
    WebFluxConfigurer redisTbDecisionArgument() {
      return new WebFluxConfigurer() {
        @Override
        public void configureArgumentResolvers(ArgumentResolverConfigurer configurer) {
          configurer.addCustomResolver(new DecisionArgumentResolvers.Reactive());
        }
      };
    }
  }
}
